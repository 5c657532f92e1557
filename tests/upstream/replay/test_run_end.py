"""How a replay run ended (``run_end``): the driver's fields, the reader of runs written before them
(the shipped findings say ``outcome``), and bad words refused by name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from workbench.run.record import STATUSES
from workbench.upstream.replay import run_end
from workbench.upstream.replay.run_end import LIBRARY_CALL, NO_METADATA_CALL, RunEndError, describe, ended

ROOT = Path(__file__).resolve().parents[3]
CASE = ROOT / "workbench/upstream/replay/wb_driver/case.py"
GRAPH_RUNNER = ROOT / "workbench/upstream/replay/wb_driver/graph_runner.py"


def test_a_run_written_now_reads_its_status_and_stop() -> None:
    assert ended({"status": "crashed", "exception": "AttributeError"}) == ("crashed", None)
    assert ended({"status": "ok", "stopped_at": LIBRARY_CALL}) == ("ok", LIBRARY_CALL)
    assert describe({"status": "ok", "stopped_at": NO_METADATA_CALL}) == "ok, stopped at no metadata call"
    assert describe({"status": "timeout"}) == "timeout" and ended({}) == ("error", None)
    assert run_end.returned({"status": "ok"}) and not run_end.returned({"status": "ok", "stopped_at": LIBRARY_CALL})
    assert set(run_end.RUN_STATUSES) == set(STATUSES) - {"killed"}


def test_a_run_written_before_reads_in_todays_words() -> None:
    assert ended({"outcome": "completed"}) == ("ok", None)
    assert ended({"outcome": "raised"}) == ("crashed", None)
    assert ended({"outcome": "library reached", "library_call": "flashinfer.plan"}) == ("ok", LIBRARY_CALL)
    assert ended({"outcome": "not called"}) == ("ok", NO_METADATA_CALL)
    assert ended({"outcome": "error", "exception": "IdlePathError"}) == ("error", None)
    assert ended({"outcome": "error", "exception": "CaseTimeout"}) == ("timeout", None)


def test_bad_words_are_refused_naming_the_valid_ones() -> None:
    with pytest.raises(RunEndError, match=r"status 'done'; valid: ok, crashed, timeout, error"):
        ended({"status": "done"})
    with pytest.raises(RunEndError, match=r"stopped_at 'library' with status 'ok'; valid: library call"):
        ended({"status": "ok", "stopped_at": "library"})
    with pytest.raises(RunEndError, match=r"stopped_at 'library call' with status 'crashed'"):
        ended({"status": "crashed", "stopped_at": LIBRARY_CALL})
    with pytest.raises(RunEndError, match=r"outcome 'finished' \(written before `status`\); valid: completed"):
        ended({"outcome": "finished"})


def test_the_shipped_findings_replays_read_through_the_old_key() -> None:
    data = json.loads((ROOT / "workbench/assets/upstream_findings.json").read_text())
    runs = [f["replay"] for f in data["findings"] if f.get("replay") and "outcome" in f["replay"]]
    assert len(runs) > 900  # written before `status`: every one reads
    seen = {ended(r) for r in runs}
    assert {("ok", None), ("crashed", None), ("ok", LIBRARY_CALL), ("error", None)} <= seen
    assert all(s in run_end.RUN_STATUSES and (p is None or p in run_end.STOPS) for s, p in seen)


def test_the_driver_writes_only_todays_words() -> None:
    """Every ``status=`` / ``"status":`` / ``stopped_at`` value the in-release driver writes (its cases and its
    graph-runner scenarios) is one `ended` reads."""
    written: set[tuple[str, str]] = set()
    for node in (n for f in (CASE, GRAPH_RUNNER) for n in ast.walk(ast.parse(f.read_text()))):
        if isinstance(node, ast.keyword) and node.arg in ("status", "stopped_at", "outcome"):
            written.add((node.arg, ast.literal_eval(node.value)))
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value in ("status", "stopped_at", "outcome"):
                    written.add((k.value, ast.literal_eval(v)))
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            key = node.targets[0].slice
            if isinstance(key, ast.Constant) and key.value in ("status", "stopped_at", "outcome"):
                written.add((key.value, ast.literal_eval(node.value)))
    assert {k for k, _ in written} == {"status", "stopped_at"}
    assert {v for k, v in written if k == "status"} == {"ok", "crashed", "timeout", "error"}
    assert {v for k, v in written if k == "stopped_at"} == set(run_end.STOPS)
