"""One crash record and one execution ending: every producer goes through its constructor, and
the nightly's expectation fields are fields of that record."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from workbench.run.record import CRASH_FIELDS, STATUSES, crash_from_exception, crash_record
from workbench.run.serialise import RecordError, from_dict, to_dict
from workbench_ci.execute import Execution, execution_result
from workbench_ci.expect import CRASH_FIELDS as CHECKED_FIELDS
from workbench_ci.expect import check_cell, check_run
from workbench_ci.matrix import EXPECT_FIELDS

ROOT = Path(__file__).resolve().parents[2]
MESSAGE = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"


def _dict_key_sets(tree: ast.AST):
    """(line, string keys) of every dict literal and dict(...) call in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            yield node.lineno, {k.value for k in node.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
            yield node.lineno, {kw.arg for kw in node.keywords}


@pytest.mark.parametrize(
    "keys,owner,dirs",
    [
        ({"exception_type", "message"}, "workbench/run/record.py", ("workbench", "ci", "kernels", "benchmarks")),
        ({"status", "error", "wall_s"}, "ci/execute.py", ("ci",)),
    ],
)
def test_no_module_builds_the_record_by_hand(keys, owner, dirs):
    """A dict literal with the record's keys anywhere but its constructor is a second constructor."""
    found = []
    for d in dirs:
        for path in sorted((ROOT / d).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != owner:
                found += [f"{rel}:{line}" for line, ks in _dict_key_sets(ast.parse(path.read_text())) if keys <= ks]
    assert found == [], f"{sorted(keys)} dict built outside {owner}: {found}"


def test_every_crash_producer_emits_exactly_the_constructors_fields(tmp_path):
    from workbench.run.config import RunConfig
    from workbench.run.dp.collect import Collector, signal_crash
    from workbench.run.dp.rank import rank_main
    from workbench.run.rank_run import run_rank
    from workbench.upstream.replay.records import _fill_from_case, _record

    produced = {}
    res = run_rank(RunConfig(model_dir=str(tmp_path / "missing")), ["x"], [0])  # fails while building the worker
    produced["runner"] = to_dict(res.crash)
    events = []

    class Sink:
        put = events.append

    rank_main(0, 1, "bogus://nowhere", RunConfig().to_dict(), ["x"], [0], Sink(), 5.0)
    produced["rank setup"] = events[-1][2]["crash"]
    last = {"phase": "verify", "forward_mode": "IDLE", "batch_size": 1}
    produced["signal"] = to_dict(signal_crash(1, -9, last, None))
    col = Collector(RunConfig(dp=2))
    dp_info = {"assignment": [[0], []], "init_method": "tcp://127.0.0.1:1", "logs": None}
    produced["timeout"] = to_dict(col.record(["x"], 1.0, "timeout", dp_info).crash)
    rec = _record("0.5.13", "triton")
    _fill_from_case(
        rec,
        {"runs": [{"status": "crashed", "exception": "AttributeError", "message": MESSAGE, "traceback": "Traceback"}]},
        "[t]",
        lambda s: None,
    )
    produced["upstream replay"] = to_dict(rec.crash)
    for name, crash in produced.items():
        assert tuple(crash) == CRASH_FIELDS, name
    assert produced["runner"]["phase"] == "setup" and produced["runner"]["exception_type"] == "CheckpointError"
    assert produced["rank setup"]["rank"] == 0 and produced["rank setup"]["phase"] == "setup"
    assert produced["signal"]["exception_type"] == "RankProcessDied" and "SIGKILL" in produced["signal"]["message"]
    assert rec.status in STATUSES and produced["upstream replay"]["message"] == MESSAGE


def test_the_nightlys_expectation_fields_are_fields_of_the_crash_record():
    assert set(EXPECT_FIELDS) - {"status", "message_contains", "raised_at"} == set(CHECKED_FIELDS)
    assert set(CHECKED_FIELDS) | {"raised_at"} <= set(CRASH_FIELDS)
    want = yaml.safe_load((ROOT / "ci" / "matrix.yaml").read_text())["expectations"]["idle_rank_kv_indptr"]
    crash = crash_record(
        rank=1,
        phase="draft-extend",
        forward_mode="IDLE",
        batch_size=1,
        exception_type="AttributeError",
        message=MESSAGE,
    )
    assert check_run(want, {"status": "crashed", "crash": crash}) == []
    for field, other in (
        ("rank", 0),
        ("phase", "verify"),
        ("forward_mode", "DECODE"),
        ("exception_type", "KeyError"),
        ("message", "something else"),
    ):
        got = check_run(want, {"status": "crashed", "crash": {**crash, field: other}})
        assert len(got) == 1 and got[0].startswith(field), (field, got)
    # raised_at keys an expectation by release: the read's line in that release's file
    at = {"file": "sglang/srt/layers/attention/triton_backend.py", "line": 891, "function": "f", "code": ""}
    one_release = {**want, "raised_at": "triton_backend.py:891"}
    assert check_run(one_release, {"status": "crashed", "crash": {**crash, "raised_at": at}}) == []
    got = check_run(one_release, {"status": "crashed", "crash": {**crash, "raised_at": {**at, "line": 593}}})
    assert got == ["raised_at 'sglang/srt/layers/attention/triton_backend.py:593'"]
    assert check_run(one_release, {"status": "crashed", "crash": crash}) == ["raised_at 'None:None'"]


def test_crash_from_exception_says_where_it_was_raised():
    try:
        {}.__getattribute__("kv_indptr")
    except AttributeError as e:
        crash = to_dict(
            crash_from_exception(e, rank=1, where={"phase": "draft-extend", "forward_mode": "IDLE", "batch_size": 1})
        )
    assert tuple(crash) == CRASH_FIELDS and crash["raised_at"]["file"] == "tests/run/test_record.py"
    assert "kv_indptr" in crash["raised_at"]["code"] and crash["traceback"].startswith("Traceback")
    with pytest.raises(ValueError, match="invalid exception_type ''"):
        crash_record(rank=0, phase=None, forward_mode=None, batch_size=None, exception_type="", message="")


def test_every_execution_status_is_judged_by_the_nightly():
    """An execution ends in the run record's words (``STATUSES``); every one but ok is a reason."""
    with pytest.raises(ValueError, match="invalid status 'completed'; valid: ok, crashed, timeout, killed, error"):
        execution_result("completed")
    bundle = {"primary": "run", "runs": {"run": {"status": "ok", "crash": None}}}
    assert check_cell({"primary": {"status": "ok"}}, execution_result("ok"), bundle) == []
    assert STATUSES[0] == "ok"
    for status in STATUSES[1:]:
        ex = execution_result(status, cell=3, ename="E", evalue="why")
        assert from_dict(Execution, json.loads(json.dumps(to_dict(ex)))) == ex  # the child's result channel
        assert check_cell({"primary": {"status": "ok"}}, ex, bundle) == [f"notebook {status} in cell 3: E: why"]
    with pytest.raises(RecordError, match=r"Execution: unknown key\(s\) \['outcome'\]"):
        from_dict(Execution, {"outcome": "completed", "status": "ok"})


def test_the_record_renders_only_through_the_view_a_face_sets(monkeypatch):
    """``RunResult`` holds no HTML of its own: without a registered view Jupyter shows its repr; a face
    (``workbench.notebook``, ``workbench.reproduce``) registers ``workbench.views.display.run_html``."""
    from workbench.run.record import RunRecord, RunResult
    from workbench.views.display import run_html, show_runs_as_html

    record = {
        "status": "ok",
        "config": {
            "backend": "torch_native",
            "revision": "pr-28221",
            "dp": 1,
            "steps": 3,
            "topk": 2,
            "draft_tokens": 4,
        },
        "crash": None,
        "metrics": {"accept_length_mean": 2.5, "tokens_per_s": 10.0},
        "outputs": [],
        "outputs_sha256": "ab" * 32,
        "env": {},
    }
    record = RunRecord.from_json(record)
    monkeypatch.setattr(RunResult, "html_view", None)
    assert RunResult(record)._repr_html_() is None and repr(RunResult(record)).startswith("RunResult: [ok]")
    show_runs_as_html()
    assert RunResult.html_view is run_html and RunResult(record)._repr_html_() == run_html(record)
    assert ">ok</span>" in RunResult(record)._repr_html_()


def _run_record_json(**changes) -> dict:
    where = {"rank": 1, "phase": "draft-extend", "forward_mode": "IDLE", "batch_size": 1}
    crash = crash_record(**where, exception_type="AttributeError", message=MESSAGE)
    rec = {
        "status": "crashed",
        "config": {"backend": "triton", "revision": "pr-24860", "dp": 2, "prompts": ["x"]},
        "crash": crash,
        "metrics": {"tokens_per_s": None},
        "outputs": [[1, 2], None],
        "outputs_sha256": None,
        "env": {"workbench_commit": "abc"},
        "dp": {
            "assignment": [[0], []],
            "init_method": "tcp://127.0.0.1:1",
            "logs": None,
            "ranks_reported": [0, 1],
            "rank_failures": [crash],
            "last_forward": {"0": {"phase": "decode", "forward_mode": "DECODE", "batch_size": 1}},
            "rank_setup_s": {"0": 1.5, "1": None},
            "port_attempts": 1,
        },
        "slots_leaked": None,
    }
    return {**rec, **changes}


def test_the_run_record_reads_its_json_and_writes_it_back_unchanged():
    from workbench.run.record import RunRecord

    data = _run_record_json()
    rec = RunRecord.from_json(json.loads(json.dumps(data)))
    assert rec.crash.rank == 1 and rec.dp.rank_failures[0].message == MESSAGE and rec.dp.assignment == [[0], []]
    assert rec.to_json() == data and [c.rank for c in rec.failures()] == [1, 1]
    # the shape a dp 1 run wrote before ``dp`` and ``slots_leaked`` were fields: both keys absent
    old = {k: v for k, v in _run_record_json(crash=None, status="ok").items() if k not in ("dp", "slots_leaked")}
    back = RunRecord.from_json(old)
    assert back.dp is None and back.slots_leaked is None and back.failures() == []
    with pytest.raises(RecordError, match=r"RunRecord.status: invalid value 'done'"):
        RunRecord.from_json(_run_record_json(status="done"))
    with pytest.raises(RecordError, match=r"RunRecord.dp.rank_failures\[0\]: missing required field"):
        RunRecord.from_json(_run_record_json(dp={**_run_record_json()["dp"], "rank_failures": [{}]}))


def test_a_rank_report_survives_the_event_stream():
    """A DP rank sends its ``RankReport`` as a JSON event; the launcher reads back the same report."""
    from workbench.run.record import RankReport

    crash = crash_from_exception(ValueError("boom"), rank=1, where={"phase": "verify"}, time=2.0)
    sent = RankReport(outputs={0: [5, 6], 3: [7]}, crash=crash, kernel="k", gen_start=1.0, samples={"x": [1.0]})
    event = json.loads(json.dumps(sent.to_event()))
    assert "metrics" not in event and set(event["outputs"]) == {"0", "3"}
    assert RankReport.from_event(event) == sent
    with pytest.raises(RecordError, match=r"RankReport: unknown key\(s\) \['status'\]"):
        RankReport.from_event({**event, "status": "done"})
