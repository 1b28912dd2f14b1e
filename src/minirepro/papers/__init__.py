"""One module or subpackage per paper; a paper never imports another paper."""
