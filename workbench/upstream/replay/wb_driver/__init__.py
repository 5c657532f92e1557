"""The replay driver: runs inside a release's environment, never imported by the workbench.

Started by ``workbench.upstream.release_process`` (target ``replay.wb_driver.main``) with the
release's (or a checkout's) sources first on ``sys.path``. Nothing here imports ``workbench``: the
release environment holds sglang's dependencies, not the workbench's. It uses the one stub system
(``in_release.stubs``: GPU libraries stubbed at import, ``GpuLibraryReached`` on first call;
``in_release.devices``: ``device="cuda"`` redirected to the CPU). Modules:

- ``setup``: server args, model config, the 1-rank process group, the real pools, the runner object;
- ``proxy``: the recording proxy a traced replay hands the backend as ``spec_info``;
- ``inputs`` / ``batches``: the spec input and the ``ForwardBatch`` of one forward mode;
- ``case``: one (backend, batch, spec class) replay; ``main``: the entry point;
- ``graph_runner``: a CUDA-graph runner's ``can_run_graph`` on a release's batch, the runner built by
  its real constructor with a STAND-IN for the graph capture.
"""
