"""Crash capture, as one observer of the run (``workbench.engine.hooks``): when a forward raises,
the batch it raised on is written as a crash bundle right there, before the exception unwinds."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from workbench.debug.bundle import new_bundle_dir, save_bundle
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.hooks import Observer


class CrashCapture(Observer):
    """Writes ``crash-bundle-rank<rank>/`` under ``directory`` (None: a new folder under
    ``workbench.debug.bundle.bundle_root()``) for the first forward that raises; ``path`` is then
    its path (None while no forward raised, or when the bundle could not be written: a warning, since
    the crash record matters more than its bundle). ``fix_applied``: the run applied PR #28221's
    field in place (the run's own state, recorded in the bundle for its replay)."""

    def __init__(self, rank: int, dp: int, revision: str, fix_applied: bool, directory: str | Path | None) -> None:
        self.rank, self.dp, self.revision, self.fix_applied = rank, dp, revision, fix_applied
        self.directory = directory
        self.phase: str | None = None
        self.path: str | None = None

    def on_phase_start(self, phase: str) -> None:
        self.phase = phase

    def on_forward_error(self, runner: Any, forward_batch: ForwardBatch, exc: BaseException) -> None:
        if self.path is not None:
            return
        try:
            directory = self.directory if self.directory is not None else new_bundle_dir()
            self.path = str(
                save_bundle(
                    directory,
                    rank=self.rank,
                    dp=self.dp,
                    phase=self.phase,
                    revision=self.revision,
                    fix_applied=self.fix_applied,
                    runner=runner,
                    forward_batch=forward_batch,
                    exc=exc,
                )
            )
        except Exception as e:  # the crash record matters more than its bundle
            warnings.warn(f"crash bundle not written: {type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)
