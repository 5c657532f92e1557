"""How one run of a reproducer (``repro_script.py``, the shipped ``repro.py`` scripts) ended.

Each run says ``status`` (``REPRO_STATUSES``, ``workbench.run.record.STATUSES`` but ``killed``):
``crashed`` (``init_forward_metadata`` raised the finding's AttributeError), ``ok`` (it returned; or,
with ``stopped_at`` ``no spec class``, the release has no such spec-input class and the script
stopped before the case), ``timeout`` (it ran past the limit) or ``error`` (it could not run: the
release's environment, a library the release imports that this host lacks, no result).

Results written before ``status`` say ``outcome``: ``raised``, ``completed``, ``absent`` or ``error``
(``ran past ...`` for a timeout). `repro_ended` reads both; every reader of a run asks it.
"""

from __future__ import annotations

NO_SPEC_CLASS = "no spec class"  # the script's `stopped_at` when the release lacks the spec-input class
REPRO_STATUSES = ("ok", "crashed", "timeout", "error")  # workbench.run.record.STATUSES but `killed`
OLD_OUTCOMES = {  # a result written before `status`: its `outcome` -> (status, stopped_at)
    "completed": ("ok", None),
    "raised": ("crashed", None),
    "absent": ("ok", NO_SPEC_CLASS),
    "error": ("error", None),
}


class ReproResultError(ValueError):
    """A reproducer's result whose end names no known status, stop or (old) outcome."""


def repro_ended(run: dict) -> tuple[str, str | None]:
    """(status, stopped_at) of one run of a reproducer, written now or before `status`."""
    if "status" in run:
        status, stop = run["status"], run.get("stopped_at")
        if status not in REPRO_STATUSES:
            raise ReproResultError(f"reproducer status {status!r}; valid: {', '.join(REPRO_STATUSES)}")
        if stop is not None and (stop != NO_SPEC_CLASS or status != "ok"):
            valid = f"{NO_SPEC_CLASS!r} with status ok"
            raise ReproResultError(f"reproducer stopped_at {stop!r} with status {status!r}; valid: {valid}")
        return status, stop
    old = run.get("outcome")
    if old not in OLD_OUTCOMES:
        valid = ", ".join(OLD_OUTCOMES)
        raise ReproResultError(f"reproducer result with neither status nor a known outcome ({old!r}); valid: {valid}")
    status, stop = OLD_OUTCOMES[old]
    if status == "error" and str(run.get("error", "")).startswith("ran past "):  # the old timeout
        status = "timeout"
    return status, stop


def describe(run: dict) -> str:
    """One run's end in words: ``crashed``, ``ok``, ``ok, stopped at no spec class``, ..."""
    status, stop = repro_ended(run)
    return f"{status}, stopped at {stop}" if stop else status
