"""The upstream guard: real SGLang releases and checkouts, checked for the spec_info attribute bug class.

- `context`: `UpstreamContext` (cache, log, time limits, environment settings), passed explicitly.
- `sources/`: releases on PyPI (`releases`), their unpacked sources and checkouts (`trees`), the
  replay environments (`envs`).
- `static/`: the one static analyser: the contract lint (`lint`, over `modes`, `classes`, `reads`,
  `installs`) and the kv_indptr survey as a query over it (`survey`).
- `replay/`: the one replay module: the driver that runs inside a release's environment
  (`wb_driver`), its one front end for releases, checkouts and crash bundles (`front`), a verdict
  for every finding (`verdicts`), the seed crash's run record (`records`), bundle replays (`bundles`).
- `runtime/`: the released runtime itself on this CPU (its scheduler, EAGLE worker and DP attention over
  gloo, one idle rank): `workbench upstream run`, and the guard's end-to-end verdicts (`e2e`).
- the pipeline (`guard`), the nightly lane (`lane`), `bisect`, the engine-vs-upstream `fidelity` check, and
  what notebook 04 reads (`measurements`).
"""
