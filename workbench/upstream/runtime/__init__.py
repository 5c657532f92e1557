"""The released SGLang runtime on this CPU (scheduler, EAGLE worker, DP attention over gloo): the real runtime.

``run_runtime(ctx, version, dp, backend, fixes, sglang_src=None, ...) -> record`` (``release_run.py``); the
guard's end-to-end verdicts (``e2e.py``). What runs inside the release's environment
(``release_rank.py``, ``shims.py``, ``fixes.py``, ``reference.py``) imports no workbench module.
"""

from .release_run import RuntimeConfigError, run_runtime

__all__ = ["RuntimeConfigError", "run_runtime"]
