/* placeholder: the cluster page (replaced by the pages work) */
