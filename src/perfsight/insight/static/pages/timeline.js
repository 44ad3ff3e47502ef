/* placeholder: the timeline page (replaced by the pages work) */
