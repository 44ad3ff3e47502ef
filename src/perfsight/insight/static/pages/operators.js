/* placeholder: the operators page (replaced by the pages work) */
