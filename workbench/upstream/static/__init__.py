"""The one static analyser of SGLang sources: the contract lint and the queries over it (the kv_indptr survey)."""
