"""What one real-runtime rank reports at its end (``RankResult``), read on the workbench's side.

``release_rank.py`` runs inside the release's interpreter and imports nothing of the workbench, so it
writes its report as JSON (``rank<R>.result.json`` in the run's folder, through the result channel);
the parent reads each report once into a ``RankResult`` (``read_rank_result``, strict:
``workbench.run.serialise.from_dict``) and the code after it (``release_launch``, ``release_record``)
reads fields. ``status`` is the house's word for how the rank ended (``workbench.run.record.STATUSES``):
``ok`` (every request it held finished; an idle rank: the busy ranks finished), ``crashed`` (its
event loop raised) or ``error`` (it failed while setting up, ``stage`` names the step). A report that
does not fit is read as an ``error`` naming the field, so the run fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from workbench.run.serialise import RecordError, from_dict

RANK_STATUSES = ("ok", "crashed", "error")


@dataclass
class RankResult:
    """One rank's report: how it ended, what it generated or raised, and its code state."""

    status: Literal["ok", "crashed", "error"]
    rank: int
    time: float | None = None  # when it wrote the report (time.time())
    timings: dict = field(default_factory=dict)
    shims: list[dict] = field(default_factory=list)
    fixes: list = field(default_factory=list)  # what each requested fix did (``fixes.apply``)
    equivalences: list = field(default_factory=list)
    extra_shims: list = field(default_factory=list)
    shim_guard: dict | None = None  # the guard after set-up; ``after_run`` once held after the run
    # ok: the token ids per request id, the finish reasons, the speculative counters per request
    outputs: dict[str, list[int]] = field(default_factory=dict)
    finished: dict = field(default_factory=dict)
    spec: dict[str, dict] = field(default_factory=dict)
    # crashed / error: where and what it raised, and the batch the crashing frames held
    stage: str | None = None
    exception: str | None = None
    message: str | None = None
    traceback: str | None = None
    frames: list[dict] = field(default_factory=list)
    batch: dict = field(default_factory=dict)
    bundle: str | None = None  # a crash in the event loop: its crash bundle (``rank_bundle.py``)
    bundle_error: str | None = None  # why that bundle could not be written

    def __post_init__(self) -> None:
        if self.status != "ok" and not (self.exception and self.message is not None):
            raise RecordError(f"RankResult: status {self.status!r} needs exception and message")


def read_rank_result(data: dict, rank: int) -> RankResult:
    """Rank ``rank``'s report; one that does not fit ``RankResult`` is an ``error`` report naming why."""
    try:
        return from_dict(RankResult, data)
    except RecordError as exc:
        return RankResult(
            status="error",
            rank=rank,
            stage="rank result",
            exception="RecordError",
            message=f"rank {rank} wrote a report that is not a RankResult: {exc}",
        )
