"""How a replay run ended (``run_end``): the driver's fields, the reader of runs written before them
(findings shipped before 7b79cf4 said ``outcome``), and bad words refused by name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from workbench.run.record import STATUSES
from workbench.run.serialise import RecordError, to_dict
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.replay import front, run_end
from workbench.upstream.replay.cases import case_key
from workbench.upstream.replay.driver import DriverRun
from workbench.upstream.replay.run_end import (
    LIBRARY_CALL,
    NO_METADATA_CALL,
    CaseRun,
    RunEndError,
    case_runs,
    describe,
    ended,
    read_run,
)
from workbench.upstream.replay.verdicts import decide
from workbench.upstream.sources.envs import ReleaseEnv

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
    with pytest.raises(RunEndError, match=r"known outcome \('finished', written before `status`\); valid: completed"):
        ended({"outcome": "finished"})


def test_the_shipped_findings_replays_say_todays_words() -> None:
    data = json.loads((ROOT / "workbench/assets/upstream_findings.json").read_text())
    runs = [f["replay"] for f in data["findings"] if f.get("replay")]
    assert len(runs) > 900 and not any("outcome" in r for r in runs)  # re-shipped after `status`
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


def test_a_run_reads_as_a_case_run_and_writes_back_key_for_key() -> None:
    run = {
        "status": "crashed",
        "exception": "AttributeError",
        "message": "'X' object has no attribute 'kv_indptr'",
        "raised_at": "sglang/a.py:3",
        "frames": [{"at": "sglang/a.py:3", "function": "f", "code": "x"}],
        "missing_attr": "kv_indptr",
        "ran": ["sglang/a.py:3"],
        "answered": [],
    }
    got = read_run(run)
    assert (got.crashed, got.returned, got.missing_attr, got.describe()) == (True, False, "kv_indptr", "crashed")
    assert {k: v for k, v in to_dict(got).items() if k in run} == run
    lib = read_run({"status": "ok", "stopped_at": LIBRARY_CALL, "library_call": "flashinfer.plan"})
    assert (lib.returned, lib.describe()) == (False, "ok, stopped at library call")
    assert read_run({}) == CaseRun("error")  # a missing run, as `ended` says


def test_a_run_written_before_reads_as_a_case_run_in_todays_words() -> None:
    old = read_run({"outcome": "library reached", "library_call": "flashinfer.plan", "raised_at": "a.py:1"})
    assert (old.status, old.stopped_at, old.library_call) == ("ok", LIBRARY_CALL, "flashinfer.plan")
    assert "outcome" not in to_dict(old)
    assert read_run({"outcome": "error", "exception": "CaseTimeout"}).status == "timeout"


def test_a_run_that_does_not_fit_is_refused_naming_the_field() -> None:
    with pytest.raises(RecordError, match=r"run 1: unknown key\(s\) \['kv'\]; valid: .*'status'"):
        case_runs({"case": {"key": "k"}, "runs": [{"status": "ok"}, {"status": "ok", "kv": 1}]})
    with pytest.raises(RecordError, match=r"CaseRun.ran: expected a list, got 'a.py:1'"):
        read_run({"status": "ok", "ran": "a.py:1"})
    with pytest.raises(RecordError, match=r"CaseRun: replay run status 'done'; valid: ok, crashed"):
        read_run({"status": "done"})


def test_every_key_the_driver_writes_into_a_run_is_a_field() -> None:
    """The keys ``wb_driver`` puts in a run (``run[k] = ...``, ``run.update(k=...)``, the literal a run starts
    as, and the crash fields ``crashed`` returns) are ``CaseRun`` fields, so a real run reads."""
    written: set[str] = set()
    for tree in (ast.parse(f.read_text()) for f in (CASE, GRAPH_RUNNER)):
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "run":
                if isinstance(node.ctx, ast.Store) and isinstance(node.slice, ast.Constant):
                    written.add(node.slice.value)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "update":
                if getattr(node.func.value, "id", None) == "run":
                    written |= {k.arg for k in node.keywords if k.arg}
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "run":
                written |= {k.value for k in node.value.keys}
            if isinstance(node, ast.FunctionDef) and node.name == "crashed":
                ret = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
                written |= {k.value for k in ret.value.keys}
    fields = set(CaseRun.__dataclass_fields__)
    assert {"status", "stopped_at", "missing_attr", "traceback", "can_run_graph", "path"} <= written
    assert written <= fields, sorted(written - fields)


def test_the_front_turns_a_case_whose_run_does_not_fit_into_an_error_case(tmp_path: Path, monkeypatch) -> None:
    """A driver run with a key no reader knows is caught where the driver's result arrives: its case is an
    error naming the field, and the finding it would have judged stays unverified, saying why."""
    env = ReleaseEnv("0.5.14", tmp_path, Path("python"), True, 0.0, {"sglang": "0.5.14"}, [])
    monkeypatch.setattr(front, "ensure_env", lambda *a, **k: env)
    good = {"case": {"key": "good"}, "runs": [{"status": "ok", "ran": []}]}
    f = {"backend_file": "b.py", "backend_class": "B", "mode": "DECODE", "spec_class": "S", "verdict": None}
    bad = {"case": {"key": case_key(f)}, "runs": [{"status": "crashed", "raised": "a.py:1"}]}
    result = {"status": "ok", "cases": [good, bad]}
    monkeypatch.setattr(front, "run_driver", lambda *a, **k: DriverRun(result, "", 1.0, False))
    out = front.replay(UpstreamContext(cache_dir=tmp_path, log=quiet), "0.5.14", [])
    assert out["cases"][0] == good
    checked = out["cases"][1]
    assert checked["stage"] == "driver record" and checked["runs"] == bad["runs"]
    assert checked["error"].startswith(f"the driver's run does not fit its record: case '{case_key(f)}' run 0:")
    assert "unknown key(s) ['raised']" in checked["error"]
    judged = decide(f, {case_key(f): checked}, out)
    assert judged["verdict"] == "unverified" and "driver record" in judged["verdict_reason"]
