"""Fault injection for the tests, as one observer of the run: ``RunConfig.fault`` ``raise@rankN``
or ``sigkill@rankN`` fails rank N at its first verify forward, inside the worker's ``run`` (so the
crash record knows the forward mode and batch size, as for a real failure)."""

from __future__ import annotations

import os
import signal

from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.hooks import Observer


class FaultInjection(Observer):
    """Raises (or SIGKILLs its own process) once, before rank ``rank``'s first verify forward, when
    ``fault`` names that rank; any other rank is left alone."""

    def __init__(self, fault: str, rank: int) -> None:
        kind, _, target = fault.partition("@rank")
        self.fault, self.rank = fault, rank
        self.kind: str | None = kind if int(target) == rank else None
        self.phase: str | None = None

    def on_phase_start(self, phase: str) -> None:
        self.phase = phase

    def on_forward_start(self, model: str, forward_batch: ForwardBatch) -> None:
        if self.kind is None or self.phase != "verify":
            return
        kind, self.kind = self.kind, None
        if kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"fault injected on rank {self.rank} (test hook {self.fault})")
