"""Fault injection for the tests, as one observer of the run: ``RunConfig.fault`` ``raise@rankN``
or ``sigkill@rankN`` fails rank N at its first verify forward, inside the worker's ``run`` (so the
crash record knows the forward mode and batch size, as for a real failure). The warm-up's verify
(``muted()``) is not the first: the fault stays for generation."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.hooks import Observer


class FaultInjection(Observer):
    """Raises (or SIGKILLs its own process) once, before rank ``rank``'s first verify forward, when
    ``fault`` names that rank; any other rank is left alone."""

    def __init__(self, fault: str, rank: int, muted: Callable[[], bool] = lambda: False) -> None:
        kind, _, target = fault.partition("@rank")
        self.fault, self.rank, self.muted = fault, rank, muted
        self.kind: str | None = kind if int(target) == rank else None
        self.phase: str | None = None

    def on_phase_start(self, phase: str) -> None:
        self.phase = phase

    def on_forward_start(self, model: str, forward_batch: ForwardBatch) -> None:
        if self.kind is None or self.phase != "verify" or self.muted():
            return
        kind, self.kind = self.kind, None
        if kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"fault injected on rank {self.rank} (test hook {self.fault})")
