"""Decoding: the acceptance rules, block and tree verification, the one speculative step and its KV-rows backends."""
