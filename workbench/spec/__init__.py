"""EAGLE spec-info inputs, the draft tree, greedy tree verification, and the kv_indptr fix."""
