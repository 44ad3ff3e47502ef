/* placeholder: the flops page (replaced by the pages work) */
