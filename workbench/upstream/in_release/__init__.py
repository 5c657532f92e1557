"""What every piece of code run inside a release's interpreter shares: the one stub system for GPU
libraries and GPU-only paths, and the one result channel.

Started only through ``workbench.upstream.release_process`` (one boot; inside the release this
folder is the package ``wb_upstream.in_release``). One import convention for all in-release code
(this package, ``replay/wb_driver``, ``runtime/release_rank.py`` and its siblings, ``runtime/reference.py``):
ordinary relative imports, no ``workbench`` import, no sys.path edits of its own. This file
imports nothing.

- ``stubs``: GPU libraries (flashinfer, aiter, ...) served from stubs at import: ``GpuLibraryReached``
  on first use while armed (the replay driver's traced cases);
- ``devices``: the one device redirect (``CudaToCpu``: ``device="cuda"`` to the CPU, ``pin_memory``
  dropped), around a replay's case (the replay driver) and installed for good by the runtime's
  ``pin-memory-cpu`` and ``cuda-device-factories`` shims;
- ``shims``: every CPU shim the real runtime applies, each declaring what it changes
  (``targets``; the shim guard holds the rest); ``shim_support``: what they build on
  (``load_functions``, the ``sgl_kernel`` import stand-in); ``cpu_ops``: torch/Triton versions of
  ``sgl_kernel``'s CPU ops;
- ``results``: ``write``, the result file every in-release entry point writes.
"""
