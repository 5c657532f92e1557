"""The guard's end-to-end step without sglang: ``confirm_end_to_end`` on stand-in runs (the earlier pass
fixed, the read compared, runs shared), its wiring into ``guard.check`` / ``workbench upstream lint
--replay --end-to-end`` (confirmed findings upgraded, the others untouched, the run records kept), and
the gate counting ``confirmed end to end`` as confirmed and failing closed when a run could not decide.
The real runs: tests/upstream/test_guard_e2e_network.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from upstream_fixtures import runtime_config, toy_tree, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.run.serialise import to_dict
from workbench.upstream import guard
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.gate import TriageEntry, judge, load_triage, triage_keys
from workbench.upstream.runtime import e2e
from workbench.upstream.runtime import release_record as record
from workbench.upstream.static.finding import read_finding
from workbench.upstream.static.lint import analyse, finding_key

READ_FILE, READ_LINE = "sglang/srt/layers/attention/triton_backend.py", 593
VERIFY = {
    **analyse(toy_tree(with_field=False))["findings"][0],  # every key of a finding; the path below is 0.5.14's
    "key": "triton|IDLE|EagleVerifyInput|kv_indptr|TritonAttnBackend.init_forward_metadata",
    "release": "0.5.14",
    "backend": "triton",
    "mode": "IDLE",
    "spec_class": "EagleVerifyInput",
    "attr": "kv_indptr",
    "read_file": READ_FILE,
    "read_line": READ_LINE,
    "verdict": "confirmed",
    "verdict_reason": "real init_forward_metadata raised",
    "verdict_by": "replay",
    "read_function": "TritonAttnBackend.init_forward_metadata",
    "reachability": {  # what reach.py says of a reaching path (the fields the end-to-end step keeps)
        "path": "EAGLEWorker.forward_draft_extend (eagle_worker.py:1) -> ModelRunner.forward (model_runner.py:2)",
        "dp_attention": "required",
        "cuda_graph": "off for this batch (the eager runner runs it)",
        "workers": [],
        "algorithms": ["EAGLE"],
        "backend_flags": ["--attention-backend triton"],
        "conditions": [],
    },
}
EXTEND = {**VERIFY, "key": VERIFY["key"].replace("Verify", "DraftExtend"), "spec_class": "EagleDraftExtendInput"}
assert finding_key(VERIFY) == VERIFY["key"] and finding_key(EXTEND) == EXTEND["key"]


def _rec(fixes: list[str], status: str = "crashed", cls: str | None = None, line: int = READ_LINE) -> dict:
    """A stand-in run record (the JSON form ``run_runtime`` returns) of a dp 2 triton run with ``fixes``."""
    cfg = runtime_config(fixes=list(fixes))
    rec = record.new(cfg)
    rec.status, rec.timings = status, {"ranks_s": 30.0}
    if status == "crashed":
        rec.crash = record.RuntimeCrash(
            rank=1,
            phase={"EagleVerifyInput": "verify"}.get(cls, "draft-extend"),
            forward_mode="IDLE",
            batch_size=1,
            exception_type="AttributeError",
            message=f"'{cls}' object has no attribute 'kv_indptr'",
            spec_info=cls,
            raised_at={"file": READ_FILE, "line": line},
        )
    if status == "error":
        rec.error = record.RunError(stage="install:torch", message="no wheel")
    return to_dict(rec)


def _between(calls: list):
    """The between-PRs state: the verify pass crashes first; with verify-input, the draft-extend pass."""

    def run(ctx, version, **kw):
        calls.append((version, kw["sglang_src"], list(kw["fixes"])))
        return _rec(kw["fixes"], cls="EagleDraftExtendInput" if kw["fixes"] else "EagleVerifyInput")

    return run


CTX = UpstreamContext(log=quiet)


def test_the_earlier_pass_is_fixed_and_the_read_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []
    monkeypatch.setattr(e2e, "run_runtime", _between(calls))
    records: list[dict] = []
    v = e2e.confirm_end_to_end(CTX, EXTEND, "0.5.14", Path("/src"), records=records)
    assert v["verdict"] == "confirmed end to end" and [r["fixes"] for r in v["runs"]] == [[], ["verify-input"]]
    assert "draft-extend pass" in v["reason"] and "verify-input applied" in v["reason"]
    assert v["runs"][1]["command"] == (
        "workbench upstream run --sglang 0.5.14 --sglang-src /src --dp 2 --backend triton "
        "--fix verify-input --no-reference"
    )
    v = e2e.confirm_end_to_end(CTX, VERIFY, "0.5.14", Path("/src"), records=records)
    assert v["verdict"] == "confirmed end to end" and len(calls) == 2  # the no-fix run is shared
    assert [r["record"] for r in v["runs"]] == [0] and len(records) == 2


def _v1_0_5_12(calls: list):
    """0.5.12's V1 worker: the idle draft pass reads a None kv_indptr (line 333) until the fallback is
    backported; then the verify pass; with the verify input fixed too, the draft-extend pass."""

    def run(ctx, version, **kw):
        fixes = list(kw["fixes"])
        calls.append((fixes, kw["disable_overlap_schedule"]))
        if "triton-idle-fallback" not in fixes:
            rec = _rec(fixes, cls="EagleDraftInput", line=333)
            rec["crash"].update(phase="draft", message="'NoneType' object has no attribute 'shape'")
            rec["crash"]["raised_at"]["function"] = "init_forward_metadata"
            return rec
        return _rec(fixes, cls="EagleDraftExtendInput" if "verify-input" in fixes else "EagleVerifyInput", line=332)

    return run


def test_0_5_12_v1_findings_run_the_v1_worker_past_the_draft_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []
    monkeypatch.setattr(e2e, "run_runtime", _v1_0_5_12(calls))
    v1 = {"install_file": "sglang/srt/speculative/eagle_worker.py", "release": "0.5.12", "read_line": 332}
    v = e2e.confirm_end_to_end(CTX, {**EXTEND, **v1}, "0.5.12")
    assert v["verdict"] == "confirmed end to end"
    assert [r["fixes"] for r in v["runs"]] == [[], ["triton-idle-fallback"], ["triton-idle-fallback", "verify-input"]]
    assert all(flag for _, flag in calls) and v["runs"][0]["command"].endswith(
        "--disable-overlap-schedule --no-reference"
    )
    assert "triton-idle-fallback + verify-input applied" in v["reason"]
    # the None read is passed only for a kv_indptr finding in the same function; elsewhere it is the answer
    calls.clear()
    other = {**EXTEND, **v1, "attr": "kv_indices", "key": EXTEND["key"].replace("kv_indptr", "kv_indices")}
    v = e2e.confirm_end_to_end(CTX, other, "0.5.12")
    assert v["verdict"] == "raised elsewhere" and "'NoneType' object has no attribute 'shape'" in v["reason"]
    v = e2e.confirm_end_to_end(CTX, {**EXTEND, **v1, "read_function": "TritonAttnBackend.other"}, "0.5.12")
    assert v["verdict"] == "raised elsewhere"
    # a V2 finding runs without the flag
    calls.clear()
    e2e.confirm_end_to_end(CTX, {**EXTEND, "read_line": 332}, "0.5.12")
    assert calls and not any(flag for _, flag in calls)


@pytest.mark.parametrize(
    ("record", "verdict"),
    [
        (_rec([], cls="EagleVerifyInput", line=600), "raised elsewhere"),
        (_rec([], status="ok"), "not reached"),
        (_rec([], status="error"), "undecided"),
        (_rec([], status="timeout"), "undecided"),
    ],
)
def test_what_a_run_answers(monkeypatch: pytest.MonkeyPatch, record: dict, verdict: str) -> None:
    monkeypatch.setattr(e2e, "run_runtime", lambda ctx, version, **kw: record)
    assert e2e.confirm_end_to_end(CTX, VERIFY, "0.5.14")["verdict"] == verdict


def test_paths_the_lane_cannot_drive_run_nothing() -> None:
    for bad, word in (
        ({"backend": "flashinfer"}, "flashinfer"),
        ({"mode": "DECODE"}, "DECODE"),
        ({"spec_class": "NgramVerifyInput"}, "NgramVerifyInput"),
    ):
        v = e2e.confirm_end_to_end(CTX, {**VERIFY, **bad}, "0.5.14")
        assert v["verdict"] == "not drivable" and word in v["reason"] and v["runs"] == []


def _wire(monkeypatch: pytest.MonkeyPatch, findings: list[dict], run) -> list:
    calls: list = []

    def replay_verdicts(ctx, tree, analysis):
        return [dict(f) for f in findings], {"status": "ok", "message": None}

    def record_run(ctx, version, **kw):
        calls.append((version, kw["sglang_src"], list(kw["fixes"])))
        return run(ctx, version, **kw)

    monkeypatch.setattr(guard, "replay_verdicts", replay_verdicts)
    monkeypatch.setattr(e2e, "run_runtime", record_run)
    return calls


def test_lint_end_to_end_upgrades_confirmed_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    refuted = {**VERIFY, "key": "triton|IDLE|EagleDraftInput|kv_indptr|x", "verdict": "refuted"}
    gpu = {**VERIFY, "key": "flashinfer|IDLE|EagleVerifyInput|kv_indptr|y", "backend": "flashinfer"}
    calls = _wire(monkeypatch, [EXTEND, VERIFY, refuted, gpu], _between([]))
    checkout = toy_tree(with_field=False).write(tmp_path / "between")
    cache = write_fake_cache(tmp_path, {})
    out = tmp_path / "lint.json"
    argv = ["--cache-dir", str(cache), "lint", "--sglang-src", str(checkout), "--replay", "--end-to-end"]
    argv += ["--env-release", "0.5.14", "--json", str(out), "--fail-on", "confirmed"]
    assert workbench_main(["upstream", *argv]) == 1
    src = (checkout / "python").resolve()
    assert calls == [("0.5.14", src, []), ("0.5.14", src, ["verify-input"])]
    result = json.loads(out.read_text())
    by_key = {f["key"]: f for f in result["findings"]}
    for f in (by_key[EXTEND["key"]], by_key[VERIFY["key"]]):
        assert f["verdict"] == "confirmed end to end" and f["verdict_by"] == "real runtime"
        assert f["reachability"]["end_to_end"]["reached"] is True and f["reachability"]["dp_attention"] == "required"
        assert "the replay: real init_forward_metadata raised" in f["verdict_reason"]
    assert by_key[refuted["key"]]["verdict"] == "refuted" and by_key[refuted["key"]]["end_to_end"] is None
    gpu_now = by_key[gpu["key"]]
    assert gpu_now["verdict"] == "confirmed" and gpu_now["end_to_end"]["verdict"] == "not drivable"
    (res,) = result["results"]
    assert res["end_to_end"]["status"] == "ok" and len(res["end_to_end"]["records"]) == 2
    assert res["end_to_end"]["verdicts"] == {"confirmed end to end": 2}
    assert "FAIL " + EXTEND["key"] in capsys.readouterr().out


def test_a_run_that_cannot_decide_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _wire(monkeypatch, [VERIFY], lambda ctx, version, **kw: _rec([], status="error"))
    checkout = toy_tree(with_field=False).write(tmp_path / "c")
    argv = ["--cache-dir", str(write_fake_cache(tmp_path, {})), "lint", "--sglang-src", str(checkout)]
    assert workbench_main(["upstream", *argv, "--replay", "--end-to-end", "--env-release", "0.5.14"]) == 2
    assert workbench_main(["upstream", *argv, "--end-to-end"]) == 2  # it upgrades what a replay confirmed: --replay


def test_the_gate_counts_end_to_end_as_confirmed(tmp_path: Path) -> None:
    f = read_finding({**VERIFY, "verdict": "confirmed end to end"})
    entry = TriageEntry(
        verdict="confirmed", status="live-filed", reason="r", decided_by="test", link="https://example.org/i/1"
    )
    keys = triage_keys(f)
    assert len(judge([f], dict.fromkeys(keys, entry), "confirmed", "0.5.14")) == 1
    assert judge([f], dict.fromkeys(keys, entry), "new", "0.5.14") == []  # known, live, linked
    accepted = replace(entry, status="accepted", link=None)
    assert judge([f], dict.fromkeys(keys, accepted), "new", "0.5.14")[0].gate.startswith("confirmed on")
    assert "now confirms" in judge([f], dict.fromkeys(keys, replace(entry, verdict="refuted")), "new", "0.5.14")[0].gate
    path = tmp_path / "t.json"
    e2e_entry = to_dict(replace(entry, verdict="confirmed end to end"))
    path.write_text(json.dumps({"schema": "upstream-triage/3", "entries": dict.fromkeys(keys, e2e_entry)}))
    assert load_triage(path)[keys[0]].verdict == "confirmed end to end"
