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

from .run_end import EndWords, end_words

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


REPRO_RUN = EndWords(
    what="reproducer result",
    statuses=REPRO_STATUSES,
    stops=(NO_SPEC_CLASS,),
    old_outcomes=OLD_OUTCOMES,
    old_timeout=lambda run: str(run.get("error", "")).startswith("ran past "),
    error=ReproResultError,
)


def repro_ended(run: dict) -> tuple[str, str | None]:
    """(status, stopped_at) of one run of a reproducer, written now or before `status`."""
    return REPRO_RUN.read(run)


def describe(run: dict) -> str:
    """One run's end in words: ``crashed``, ``ok``, ``ok, stopped at no spec class``, ..."""
    return end_words(*repro_ended(run))
