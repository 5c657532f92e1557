"""A matrix cell's result (``CellResult``): the cell, the parameters it ran with, how its notebook's
execution ended, the notebook's record, the files it wrote and the verdict; ``workbench.run.serialise``
writes it into ``nightly-results.json`` and reads it back when shards merge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from workbench_ci.execute import Execution

Verdict = Literal["expected", "unexpected"]


@dataclass
class CellResult:
    """One cell of a night. ``verdict`` judges it: expected when ``reasons`` is empty."""

    name: str
    notebook: str
    parameters: dict
    expect: dict[str, dict]
    defaults: dict
    execution: Execution
    notebook_record: dict | None  # the notebook's record bundle ({primary, runs, ...}), None when unreadable
    paths: dict[str, str] = field(default_factory=dict)  # relative to the output folder
    reasons: list[str] = field(default_factory=list)
    verdict: Verdict = "expected"

    def judge(self, extra: list[str] | None = None) -> None:
        """Add ``extra`` reasons and set the verdict from all of them."""
        self.reasons = self.reasons + list(extra or [])
        self.verdict = "unexpected" if self.reasons else "expected"

    def runs(self) -> dict[str, dict]:
        """The notebook record's run records by role (none when there is no record)."""
        return (self.notebook_record or {}).get("runs") or {}

    def primary(self) -> dict | None:
        """The notebook record's primary run record, if any."""
        return self.runs().get((self.notebook_record or {}).get("primary"))
