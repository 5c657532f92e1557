"""EAGLE3 + DP-attention regression workbench: reproduce SGLang's ``kv_indptr`` crash, apply the fix,
compare backends.

The names below load on first use, so ``import workbench`` stays light (a rank process imports this
package before it chooses where its kernels run). Taking ``reproduce`` or ``RunResult`` from here
also makes a ``RunResult`` show as HTML in Jupyter (``workbench.views.display.run_html``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RunConfig",
    "RunResult",
    "reproduce",
    "apply_fix",
    "undo_fix",
    "fix_applied",
    "is_fix_applied",
    "REVISIONS",
    "replay_crash",
    "load_bundle",
]


def __getattr__(name: str) -> Any:  # every import below is lazy: the names load on first use (module docstring)
    if name in ("reproduce", "RunResult"):
        from workbench.run.api import reproduce
        from workbench.run.record import RunResult
        from workbench.views.display import show_runs_as_html

        show_runs_as_html()
        return reproduce if name == "reproduce" else RunResult
    if name == "RunConfig":
        from workbench.run.config import RunConfig

        return RunConfig
    if name in ("apply_fix", "undo_fix", "fix_applied", "is_fix_applied"):
        from workbench.speculative import eagle_draft_extend_pr28221 as fix

        return getattr(fix, name)
    if name == "replay_crash":
        from workbench.debug.replay import replay_crash

        return replay_crash
    if name == "load_bundle":
        from workbench.debug.load import load_bundle

        return load_bundle
    if name == "REVISIONS":
        from workbench.speculative.revisions import REVISIONS

        return REVISIONS
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
