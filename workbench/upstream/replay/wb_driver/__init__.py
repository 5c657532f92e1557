"""The replay driver: runs inside a release's replay environment, never imported by the workbench.

Launched as ``python -I -c "...; wb_driver.main.main()" CFG.json`` with this package's parent folder
and the release's (or a checkout's) sources on ``sys.path``. Nothing here imports ``workbench``:
the replay environment holds sglang's dependencies, not the workbench's. Modules:

- ``setup``: server args, model config, the 1-rank process group, the real pools, the runner object;
- ``devices``: ``device="cuda"`` in the release's constructors redirected to the CPU;
- ``stubs``: GPU libraries (flashinfer, aiter, ...) stubbed at import: ``GpuLibraryReached`` on first call;
- ``proxy``: the recording proxy a traced replay hands the backend as ``spec_info``;
- ``inputs`` / ``batches``: the spec input and the ``ForwardBatch`` of one forward mode;
- ``case``: one (backend, batch, spec class) replay; ``main``: the entry point.
"""
