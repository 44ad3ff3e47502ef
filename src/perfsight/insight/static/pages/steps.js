/* placeholder: the steps page (replaced by the pages work) */
