"""The one seam where a run watches the engine: an ``Observer`` protocol, called where things happen.

The engine calls ``Hooks`` (a fan-out over observers) at the points below, and nothing else is
wrapped: no engine or backend method is rebound.

    WorkerBase.phase          on_phase_start(phase) ... on_phase(phase, seconds, idle)
    WorkerBase.run            on_forward_start(model, fb); the forward;
                              on_forward(model, fb, seconds) or on_forward_error(runner, fb, exc)
    ModelRunner.forward[_idle], MultiStepDraftBackend.init_forward_metadata
                              on_metadata(model, fb, seconds)     (one init_forward_metadata call)
    AttentionBackend.forward  on_attention(layer_id, fb, seconds) (one layer: KV write + kernel)
    EagleWorker._accept       on_accepts(accepted_drafts)         (per request, one verify)
    DPCommunicator            on_collective(name, seconds)        (begin_forward, mlp, any_rank)

``model`` is ``"target"`` or ``"draft"``. An exception raised by ``on_forward_start`` (fault
injection) stops the run before the forward; it is not a failed forward. Timed calls read the
clock only when an observer takes that event, and synchronize first on CUDA, so a sample is the
work's time, not its launch's. The observers of a run are listed in one place per process:
``workbench.run.rank_run.observers``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch

EVENTS = (
    "on_phase_start",
    "on_phase",
    "on_forward_start",
    "on_forward",
    "on_forward_error",
    "on_metadata",
    "on_attention",
    "on_accepts",
    "on_collective",
)


class Observer:
    """What a run can watch; every method is a no-op here, an observer overrides the ones it takes."""

    def on_phase_start(self, phase: str) -> None:
        """A phase of a scheduling round begins (prefill, draft, verify, draft-extend, decode)."""

    def on_phase(self, phase: str, seconds: float, idle: bool) -> None:
        """The phase ended after ``seconds``; ``idle``: its forwards were IDLE (a DP rank without requests)."""

    def on_forward_start(self, model: str, forward_batch: ForwardBatch) -> None:
        """A forward of ``model`` is about to run."""

    def on_forward(self, model: str, forward_batch: ForwardBatch, seconds: float) -> None:
        """The forward returned after ``seconds`` (metadata, layers and DP collectives)."""

    def on_forward_error(self, runner: Any, forward_batch: ForwardBatch, exc: BaseException) -> None:
        """The forward raised ``exc`` (re-raised after the observers saw it); ``runner`` is its ModelRunner."""

    def on_metadata(self, model: str, forward_batch: ForwardBatch, seconds: float) -> None:
        """One ``init_forward_metadata`` call took ``seconds``."""

    def on_attention(self, layer_id: int, forward_batch: ForwardBatch, seconds: float) -> None:
        """One layer's attention (KV write and kernel) took ``seconds``."""

    def on_accepts(self, accepted_drafts: list[int]) -> None:
        """One verify accepted these many draft tokens per request."""

    def on_collective(self, name: str, seconds: float) -> None:
        """A DP collective (``begin_forward``, ``mlp`` with its shard compute, ``any_rank``) took ``seconds``."""


class Hooks(Observer):
    """The observers of one run, called in order. Per event it keeps only the observers that
    override it, so an event nobody takes costs one empty loop; ``times_*`` say whether the engine
    needs the clock for that event."""

    def __init__(self, observers: Sequence[Observer] = (), synchronize: Callable[[], None] | None = None) -> None:
        self.observers = tuple(observers)
        self._sync = synchronize
        if synchronize is None:  # a CPU run reads the clock directly: two calls per timed event, per layer
            self.clock = time.perf_counter
        self._takers: dict[str, tuple[Callable[..., None], ...]] = {
            e: tuple(getattr(o, e) for o in self.observers if getattr(type(o), e) is not getattr(Observer, e))
            for e in EVENTS
        }
        self.times_forwards = bool(self._takers["on_forward"])
        self.times_metadata = bool(self._takers["on_metadata"])
        self.times_attention = bool(self._takers["on_attention"])
        self.times_collectives = bool(self._takers["on_collective"])

    def clock(self) -> float:
        """``time.perf_counter()``, after synchronizing the device when the run is on CUDA."""
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    def on_phase_start(self, phase: str) -> None:
        for f in self._takers["on_phase_start"]:
            f(phase)

    def on_phase(self, phase: str, seconds: float, idle: bool) -> None:
        for f in self._takers["on_phase"]:
            f(phase, seconds, idle)

    def on_forward_start(self, model: str, forward_batch: ForwardBatch) -> None:
        for f in self._takers["on_forward_start"]:
            f(model, forward_batch)

    def on_forward(self, model: str, forward_batch: ForwardBatch, seconds: float) -> None:
        for f in self._takers["on_forward"]:
            f(model, forward_batch, seconds)

    def on_forward_error(self, runner: Any, forward_batch: ForwardBatch, exc: BaseException) -> None:
        for f in self._takers["on_forward_error"]:
            f(runner, forward_batch, exc)

    def on_metadata(self, model: str, forward_batch: ForwardBatch, seconds: float) -> None:
        for f in self._takers["on_metadata"]:
            f(model, forward_batch, seconds)

    def on_attention(self, layer_id: int, forward_batch: ForwardBatch, seconds: float) -> None:
        for f in self._takers["on_attention"]:
            f(layer_id, forward_batch, seconds)

    def on_accepts(self, accepted_drafts: list[int]) -> None:
        for f in self._takers["on_accepts"]:
            f(accepted_drafts)

    def on_collective(self, name: str, seconds: float) -> None:
        for f in self._takers["on_collective"]:
            f(name, seconds)


NO_HOOKS = Hooks()  # an engine built outside a run (tests, replays, the fuzzer): nothing watches
