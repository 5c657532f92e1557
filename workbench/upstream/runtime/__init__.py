"""The released SGLang runtime on this CPU (scheduler, EAGLE worker, DP attention over gloo) as a lane.

``run_runtime(ctx, version, dp, backend, fixes, sglang_src=None, ...) -> record`` (``run.py``); the
guard's end-to-end verdicts (``e2e.py``). What runs inside the release's replay environment
(``rank.py``, ``shims.py``, ``fixes.py``, ``reference.py``) imports no workbench module.
"""

from .run import RuntimeConfigError, run_runtime

__all__ = ["RuntimeConfigError", "run_runtime"]
