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

Runs written before these fields (the shipped findings' ``replay``, an oracle cache) say ``outcome``:
``completed``, ``raised``, ``library reached``, ``not called`` or ``error`` (``CaseTimeout`` for a
timeout). `ended` reads both; every reader of a run asks it.
"""

from __future__ import annotations

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


def ended(run: dict) -> tuple[str, str | None]:
    """(status, stopped_at) of one replay run, written now or before; a missing run (``{}``) is ``error``."""
    if "status" in run:
        status, stop = run["status"], run.get("stopped_at")
        if status not in RUN_STATUSES:
            raise RunEndError(f"replay run status {status!r}; valid: {', '.join(RUN_STATUSES)}")
        if stop is not None and (stop not in STOPS or status != "ok"):
            valid = f"{', '.join(STOPS)}, with status ok"
            raise RunEndError(f"replay run stopped_at {stop!r} with status {status!r}; valid: {valid}")
        return status, stop
    if "outcome" not in run:
        return "error", None
    old = run["outcome"]
    if old not in OLD_OUTCOMES:
        raise RunEndError(f"replay run outcome {old!r} (written before `status`); valid: {', '.join(OLD_OUTCOMES)}")
    status, stop = OLD_OUTCOMES[old]
    if status == "error" and run.get("exception") == "CaseTimeout":
        status = "timeout"
    return status, stop


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
    status, stop = ended(run)
    return f"{status}, stopped at {stop}" if stop else status
