"""Speculative decoding as in SGLang's ``speculative/``: spec-info inputs, the EAGLE3 worker, the draft
tree, and the draft-extend classes of PR #24860 and PR #28221."""
