/* placeholder: the resources page (replaced by the pages work) */
