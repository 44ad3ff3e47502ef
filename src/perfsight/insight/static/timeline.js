/* placeholder: replaced by the page/timeline work */
