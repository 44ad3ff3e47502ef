/* placeholder: the data page (replaced by the pages work) */
