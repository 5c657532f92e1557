"""The upstream guard: real SGLang releases and checkouts, checked for the spec_info attribute bug class.

- `context`: `UpstreamContext` (cache, log, time limits, environment settings), passed explicitly.
- `sources/`: releases on PyPI (`releases`), their unpacked sources and checkouts (`trees`), the
  replay environments (`envs`).
- `static/`: the one static analyser: the contract lint (`lint`, over `modes`, `classes`, `reads`,
  `installs`) and the kv_indptr survey as a query over it (`survey`).
- the replays (`driver`, `triage`, `release_replay`, `bundle_replay`), the pipeline (`guard`), the
  nightly lane (`lane`), `bisect`, and the engine-vs-upstream `fidelity` check.
"""
