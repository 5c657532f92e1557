"""What a run reports as it goes, through the ``on_event(kind, rank, payload)`` callback the caller
passes (``reproduce``, ``bench``, ``compare``, ``sweep``); nothing is registered globally.

Rank events (``rank`` is the DP rank; streamed by each rank process to the launcher, which hands
them to ``on_event`` as they arrive; a dp 1 run reports ``done`` only, so nothing runs inside its
timed generation):

    forward   {"phase", "forward_mode", "batch_size"}: a forward is about to run
    latency   [phase, seconds, idle]: a phase ended
    accepts   [accepted drafts per request]: a verify ended
    done      the rank's result (``workbench.run.rank_run.run_rank``), ``crash`` None or the crash entry

Run events (``rank`` None; sent by the functions that make several runs):

    plan      {"runs": n}: n more runs are coming
    run       {"label", "status"}: one run ended
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from workbench.engine.hooks import Observer

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch

OnEvent = Callable[[str, int | None, Any], None]
RANK_EVENTS = ("forward", "latency", "accepts", "done")
RUN_EVENTS = ("plan", "run")


class EventSink(Protocol):
    def put(self, event: tuple[str, int, Any]) -> None: ...


class EventStream(Observer):
    """A rank's events (``forward``, ``latency``, ``accepts``) into ``sink`` as they happen: the DP
    rank process streams them to its launcher. While ``muted()`` (the warm-up) it sends forwards only:
    the launcher keeps the phases and accepts it receives as the run's."""

    def __init__(self, rank: int, sink: EventSink, muted: Callable[[], bool] = lambda: False) -> None:
        self.rank, self.sink, self.muted = rank, sink, muted
        self.phase: str | None = None

    def on_phase_start(self, phase: str) -> None:
        self.phase = phase

    def on_forward_start(self, model: str, forward_batch: ForwardBatch) -> None:
        what = {"phase": self.phase, "forward_mode": forward_batch.forward_mode.name}
        self.sink.put(("forward", self.rank, {**what, "batch_size": forward_batch.batch_size}))

    def on_phase(self, phase: str, seconds: float, idle: bool) -> None:
        if not self.muted():
            self.sink.put(("latency", self.rank, (phase, seconds, idle)))

    def on_accepts(self, accepted_drafts: list[int]) -> None:
        if not self.muted():
            self.sink.put(("accepts", self.rank, list(accepted_drafts)))
