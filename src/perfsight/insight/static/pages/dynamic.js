/* placeholder: the dynamic page (replaced by the pages work) */
