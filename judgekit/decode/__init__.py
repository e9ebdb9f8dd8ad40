"""Decoding: the acceptance rules, block verification, the speculative decoder and its fast static-cache path."""
