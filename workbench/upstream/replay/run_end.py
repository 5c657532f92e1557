"""How one replay run ended: its ``status`` and, for a run the driver stopped early, ``stopped_at``.

The replay driver (``wb_driver/case.py``) writes each run of a case with

- ``status`` (``workbench.run.record.STATUSES``): ``ok`` (the metadata call returned, or the run
  stopped at a point below), ``crashed`` (the release's code raised), ``timeout`` (it ran past the
  case's limit) or ``error`` (the driver could not run it: the idle runner path failed on a batch the
  runner never hands to the backend);
- ``stopped_at`` (``STOPS``), only with ``ok``: ``library call`` (the run reached a GPU library
  stubbed at import, and the stub stopped it there; ``library_call`` names the call) or ``no metadata
  call`` (the release's idle runner path returned without calling ``init_forward_metadata``) or
  ``graph decision`` (a graph-runner replay, ``wb_driver/graph_runner.py``: ``can_run_graph`` answered,
  and the run stopped before any graph).

Runs written before these fields (an oracle cache, findings written before 7b79cf4) say ``outcome``:
``completed``, ``raised``, ``library reached``, ``not called`` or ``error`` (``CaseTimeout`` for a
timeout). `ended` reads both.

A run as a record is a ``CaseRun``: ``read_run`` reads one strictly (a run written before reads in
today's words), and the replay's front (``front.replay``) reads every run the driver returns once, so a
run that does not fit turns its case into an error naming the field. The result keeps each run's JSON
form for the readers that still pass dicts (the oracle, the family verdicts, the graph-runner
decisions: they ask `ended`); the verdicts, the seed record and the bundle replay read ``CaseRun``
fields (``case_runs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.run.serialise import RecordError, from_dict

LIBRARY_CALL = "library call"
NO_METADATA_CALL = "no metadata call"
GRAPH_DECISION = "graph decision"
STOPS = (LIBRARY_CALL, NO_METADATA_CALL, GRAPH_DECISION)
RUN_STATUSES = ("ok", "crashed", "timeout", "error")  # STATUSES but `killed`: a run lives in the driver's process
OLD_OUTCOMES = {
    "completed": ("ok", None),
    "raised": ("crashed", None),
    "library reached": ("ok", LIBRARY_CALL),
    "not called": ("ok", NO_METADATA_CALL),
    "error": ("error", None),
}


class RunEndError(ValueError):
    """A replay run whose end names no known status, stop or (old) outcome."""


@dataclass(frozen=True)
class EndWords:
    """The words one kind of run may end in, and how its results written before ``status`` map onto
    them: the replay driver's run here, a reproducer's (``repro_end.py``)."""

    what: str  # names the run in errors: ``replay run``
    statuses: tuple[str, ...]
    stops: tuple[str, ...]  # the ``stopped_at`` words, each only with status ``ok``
    old_outcomes: dict[str, tuple[str, str | None]]  # ``outcome`` -> (status, stopped_at)
    old_timeout: Callable[[dict], bool]  # an old ``error`` that was a timeout
    error: type[ValueError]
    missing: tuple[str, str | None] | None = None  # the end of a run with neither key; None: refused

    def read(self, run: dict) -> tuple[str, str | None]:
        """(status, stopped_at) of one run, written now or before ``status``."""
        if "status" in run:
            status, stop = run["status"], run.get("stopped_at")
            if status not in self.statuses:
                raise self.error(f"{self.what} status {status!r}; valid: {', '.join(self.statuses)}")
            if stop is not None and (stop not in self.stops or status != "ok"):
                valid = f"{', '.join(self.stops)}, with status ok"
                raise self.error(f"{self.what} stopped_at {stop!r} with status {status!r}; valid: {valid}")
            return status, stop
        old = run.get("outcome")
        if old is None and self.missing is not None:
            return self.missing
        if old not in self.old_outcomes:
            valid = ", ".join(self.old_outcomes)
            known = f"neither status nor a known outcome ({old!r}, written before `status`)"
            raise self.error(f"{self.what} with {known}; valid: {valid}")
        status, stop = self.old_outcomes[old]
        return ("timeout", stop) if status == "error" and self.old_timeout(run) else (status, stop)


REPLAY_RUN = EndWords(
    what="replay run",
    statuses=RUN_STATUSES,
    stops=STOPS,
    old_outcomes=OLD_OUTCOMES,
    old_timeout=lambda run: run.get("exception") == "CaseTimeout",
    error=RunEndError,
    missing=("error", None),
)


def ended(run: dict) -> tuple[str, str | None]:
    """(status, stopped_at) of one replay run, written now or before; a missing run (``{}``) is ``error``."""
    return REPLAY_RUN.read(run)


def crashed(run: dict) -> bool:
    """Whether the release's code raised in this run."""
    return ended(run)[0] == "crashed"


def returned(run: dict) -> bool:
    """Whether the run's metadata call returned (status ``ok``, not stopped early)."""
    return ended(run) == ("ok", None)


def stopped_at(run: dict) -> str | None:
    """Where the driver stopped the run early (``STOPS``), or None."""
    return ended(run)[1]


def describe(run: dict) -> str:
    """The run's end in words: ``ok``, ``ok, stopped at library call``, ``crashed``, ..."""
    return end_words(*ended(run))


def end_words(status: str, stop: str | None) -> str:
    """``ok``, ``ok, stopped at library call``, ...: a (status, stopped_at) in words."""
    return f"{status}, stopped at {stop}" if stop else status


@dataclass
class CaseRun:
    """One run of a replay case, as the driver writes it (``wb_driver/case.py``, ``graph_runner.py``)."""

    status: str
    stopped_at: str | None = None
    exception: str | None = None  # the exception's class name
    message: str | None = None
    raised_at: str | None = None  # ``file:line`` of the innermost sglang frame, or of the library call
    frames: list[dict] = field(default_factory=list)
    traceback: str | None = None
    library_call: str | None = None
    missing_attr: str | None = None  # the spec input's attribute an AttributeError named
    answered: list[str] = field(default_factory=list)  # ``attr=None`` / ``attr=the batch's value``
    ran: list[str] = field(default_factory=list)  # the watched ``file:line``s that ran
    entered: list[str] = field(default_factory=list)
    library_passed: list[str] = field(default_factory=list)
    library_built: list[str] = field(default_factory=list)
    reads: list[str] | None = None  # a traced case's reads of ``spec_info``
    metrics: dict = field(default_factory=dict)
    idle_path: dict | None = None
    path: str | None = None  # a graph-runner case: the runner path it drove
    can_run_graph: Any = None  # a graph-runner case: what the release's ``can_run_graph`` returned

    @property
    def crashed(self) -> bool:
        """Whether the release's code raised in this run."""
        return self.status == "crashed"

    @property
    def returned(self) -> bool:
        """Whether the run's metadata call returned (status ``ok``, not stopped early)."""
        return self.status == "ok" and self.stopped_at is None

    def describe(self) -> str:
        """The run's end in words (as `describe`)."""
        return end_words(self.status, self.stopped_at)


def read_run(data: dict, where: str = "CaseRun") -> CaseRun:
    """One driver run, strictly: ``RecordError`` names the field. A run written before ``status`` reads
    in today's words (its ``outcome`` becomes ``status`` and ``stopped_at``); a missing run (``{}``) is
    ``error``, as `ended` says."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object (dict), got {type(data).__name__}")
    try:
        status, stop = ended(data)
    except RunEndError as exc:
        raise RecordError(f"{where}: {exc}") from None
    now = {k: v for k, v in data.items() if k != "outcome"}
    if "outcome" in data:
        now["stopped_at"] = stop
    return from_dict(CaseRun, {**now, "status": status}, where)


def case_runs(case: dict) -> list[CaseRun]:
    """The runs of one case the driver returned (``case["runs"]``), each read by `read_run`."""
    key = (case.get("case") or {}).get("key", "?")
    return [read_run(r, f"case {key!r} run {i}") for i, r in enumerate(case.get("runs") or [])]
