/* placeholder: the overview page (replaced by the pages work) */
