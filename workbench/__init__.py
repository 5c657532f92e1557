"""EAGLE3 + DP-attention regression workbench: reproduce SGLang's ``kv_indptr`` crash, apply the fix,
compare backends."""

from __future__ import annotations

from typing import Any

__all__ = [
    "RunConfig",
    "RunResult",
    "reproduce",
    "apply_fix",
    "undo_fix",
    "fix_applied",
    "REVISIONS",
    "replay_crash",
    "load_bundle",
]


def __getattr__(name: str) -> Any:
    if name == "reproduce":
        from workbench.run.api import reproduce

        return reproduce
    if name == "RunConfig":
        from workbench.run.config import RunConfig

        return RunConfig
    if name == "RunResult":
        from workbench.run.record import RunResult

        return RunResult
    if name in ("apply_fix", "undo_fix", "fix_applied"):
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
