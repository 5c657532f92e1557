"""The graph-runner replay (`replay/runner_decisions.py`, `wb_driver/graph_runner.py`): finding the
read, applying the fix, judging a driver record, the family's runner verdicts and the CLI's exit codes
on synthetic records; the corpus case on the real 0.5.16 and 0.5.17 wheels (network)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from workbench.cli import main as workbench_main
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.replay import family_verdicts, runner_decisions
from workbench.upstream.replay.runner_decisions import (
    DSPARK_FILE,
    FIX_LINE,
    RUNNER_FILE,
    RUNNER_FUNCTION,
    apply_fix,
    judge,
    read_lines,
    runner_decision,
)
from workbench.upstream.replay.wb_driver.graph_runner import run_graph_case
from workbench.upstream.sources.trees import memory_tree

RUNNER = textwrap.dedent("""
    class DecodeCudaGraphRunner:
        def can_run_graph(self, forward_batch):
            if forward_batch.replace_embeds is not None:
                return False
            if self.require_mlp_tp_gather:
                cuda_graph_bs = max(forward_batch.original_global_num_tokens_cpu)
            else:
                cuda_graph_bs = forward_batch.batch_size
            return cuda_graph_bs <= self.max_bs
        def other(self, forward_batch):
            return forward_batch.original_global_num_tokens_cpu
""")
DSPARK = textwrap.dedent("""
    class DraftBlockProposer:
        def _fill_dp_moe_sync_metadata(self, forward_batch, batch):
            if not self._dp_moe_sync or batch.global_num_tokens is None:
                return
            gnt, gnt_logprob = batch.global_num_tokens, batch.global_num_tokens_for_logprob
            forward_batch.global_num_tokens_cpu = gnt
            forward_batch.global_num_tokens_for_logprob_cpu = gnt_logprob
""")
LINE = RUNNER.splitlines().index("            cuda_graph_bs = max(forward_batch.original_global_num_tokens_cpu)") + 1
AT = f"{RUNNER_FILE}:{LINE}"


def _record(run: dict | None = None, error: str | None = None) -> dict:
    rec: dict = {"case": {"key": "dspark-idle|x"}, "stage": "graph runner", "runs": []}
    if error:
        rec["error"] = error
    else:
        rec["runs"].append({"path": "DraftBlockProposer.run_idle_participation", **(run or {})})
    return rec


def test_the_read_is_found_in_can_run_graph_only() -> None:
    tree = memory_tree({RUNNER_FILE: RUNNER}, "toy")
    assert read_lines(tree) == [LINE]  # `other` reads it too, but is not can_run_graph
    assert read_lines(memory_tree({RUNNER_FILE: RUNNER.replace("original_global", "plain")}, "toy")) == []
    assert read_lines(memory_tree({}, "toy")) == []


def test_the_fix_sets_the_field_after_the_gathered_counts() -> None:
    fixed = apply_fix(memory_tree({DSPARK_FILE: DSPARK}, "toy")).get(DSPARK_FILE)
    lines = fixed.splitlines()
    at = lines.index("        forward_batch.global_num_tokens_cpu = gnt")
    assert lines[at + 1] == f"        {FIX_LINE}"
    assert len(lines) == len(DSPARK.splitlines()) + 1
    with pytest.raises(ValueError, match="without the fix"):
        apply_fix(memory_tree({DSPARK_FILE: fixed}, "toy"))
    with pytest.raises(ValueError, match="no sglang/srt/speculative"):
        apply_fix(memory_tree({}, "toy"))
    with pytest.raises(ValueError, match="not found"):
        apply_fix(memory_tree({DSPARK_FILE: DSPARK.replace(" = gnt\n", " = list(gnt)\n")}, "toy"))


def test_a_record_is_judged_by_where_it_raised_and_which_lines_ran() -> None:
    none_error = {"status": "crashed", "exception": "TypeError", "message": "'NoneType' object is not iterable"}
    cases = {
        "confirmed": _record({**none_error, "raised_at": AT}),
        "unverified: elsewhere": _record({**none_error, "raised_at": f"{RUNNER_FILE}:1"}),
        "unverified: not a None": _record(
            {
                "status": "crashed",
                "exception": "ValueError",
                "message": "max() arg is an empty sequence",
                "raised_at": AT,
            }
        ),
        "refuted": _record({"status": "ok", "stopped_at": "graph decision", "can_run_graph": True, "ran": [AT]}),
        "unverified: never ran": _record(
            {"status": "ok", "stopped_at": "graph decision", "can_run_graph": False, "ran": []}
        ),
        "unverified: not built": _record(error="AttributeError: no tp_group"),
    }
    for name, rec in cases.items():
        verdict, reason = judge(rec, [AT], {"status": "ok"})
        assert verdict == name.split(":")[0], (name, reason)
    # an empty value is confirmed by any error at the line
    assert judge(cases["unverified: not a None"], [AT], {"status": "ok"}, none=False)[0] == "confirmed"
    assert judge(None, [AT], {"status": "error", "message": "no env"}) == (
        "unverified",
        "no replay ran (error: no env)",
    )
    assert judge(cases["refuted"], [AT], {})[1].endswith(f"decode_cuda_graph_runner.py:{LINE} ran without raising")


def test_a_release_without_the_read_is_unverified_without_a_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_decisions, "release_tree", lambda ctx, v: memory_tree({}, f"sglang {v}", v))
    monkeypatch.setattr(runner_decisions, "replay", lambda *a, **k: pytest.fail("no replay without the read"))
    rec = runner_decision(None, "0.5.15")
    assert rec["verdict"] == "unverified" and rec["replay"] is None
    assert "reads no forward_batch.original_global_num_tokens_cpu on 0.5.15" in rec["reason"]


def test_the_replay_runs_the_fixed_tree_and_names_the_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {RUNNER_FILE: RUNNER, DSPARK_FILE: DSPARK}
    monkeypatch.setattr(runner_decisions, "release_tree", lambda ctx, v: memory_tree(files, f"sglang {v}", v))
    seen = []

    def fake_replay(ctx, target, cases, extra=None):
        seen.append((target, cases, extra))
        run = {"status": "ok", "stopped_at": "graph decision", "can_run_graph": True, "ran": [AT]}
        return {"status": "ok", "cases": [_record(run)]}

    monkeypatch.setattr(runner_decisions, "replay", fake_replay)
    rec = runner_decision(None, "0.5.16", fix=True)
    ((target, (case,), extra),) = seen
    assert FIX_LINE in target.get(DSPARK_FILE) and case["watch"] == [AT] and case["graph_runner"]
    assert extra["server_args"]["enable_dp_attention"] and extra["server_args"]["speculative_algorithm"] == "DSPARK"
    assert rec["verdict"] == "refuted" and "PR #33098" in rec["fix_applied"]
    assert rec["stand_in"].startswith("STAND-IN: DecodeCudaGraphRunner.capture")
    assert rec["reason"].endswith(f"[{rec['stand_in']}]")  # the verdict's text names the stand-in
    assert runner_decisions.format_decision(rec).startswith("sglang 0.5.16 + fix: refuted: ")


def test_the_family_judges_can_run_graph_findings_by_the_graph_runner_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"kind": "runner-none-deref", "read_file": RUNNER_FILE, "idle_value": "None", "deref_line": LINE}
    findings = [
        {**base, "read_function": RUNNER_FUNCTION},
        {**base, "read_function": "DecodeCudaGraphRunner.other"},
    ]
    run = {"status": "crashed", "exception": "TypeError", "message": "'NoneType' object is not iterable"}
    calls = []

    def fake_graph_replay(ctx, tree, watch):
        calls.append(watch)
        return {"status": "ok"}, _record({**run, "raised_at": AT})

    monkeypatch.setattr(family_verdicts, "graph_replay", fake_graph_replay)
    monkeypatch.setattr(family_verdicts, "replay", lambda *a, **k: pytest.fail("no attention replay planned"))
    family = {"findings": findings, "spec_idle_values": {}, "spec_classes_files": {}}
    out, summary = family_verdicts.family_verdicts(None, memory_tree({}, "toy"), family)
    assert calls == [[AT]] and summary["graph_runner_findings"] == 1
    assert out[0]["verdict"] == "confirmed" and out[0]["verdict_by"] == "replay"
    assert "STAND-IN: DecodeCudaGraphRunner.capture" in out[0]["verdict_reason"]
    assert out[1]["verdict"] == "unverified" and out[1]["verdict_reason"] == family_verdicts.RUNNER_REASON


def test_an_unknown_scenario_is_a_record_naming_the_known_ones() -> None:
    rec = run_graph_case(None, {"scenario": "decode"}, {})
    assert rec["error"] == "unknown graph-runner scenario 'decode' (known: dspark-idle)" and rec["runs"] == []


@pytest.mark.parametrize(
    ("verdicts", "code"), [(["confirmed", "refuted", "refuted"], 0), (["refuted", "unverified"], 1)]
)
def test_the_cli_runs_the_fix_after_a_confirmation_and_exits_by_the_verdicts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, verdicts: list[str], code: int
) -> None:
    from workbench.upstream.sources import releases

    queue = list(verdicts)
    calls = []

    def fake(ctx, version, fix=False):
        calls.append((version, fix))
        v = queue.pop(0)
        return {"release": version, "fix_applied": "x" if fix else None, "verdict": v, "reason": "r", "replay": None}

    monkeypatch.setattr(releases, "check_versions", lambda ctx, vs: list(vs))
    monkeypatch.setattr(runner_decisions, "runner_decision", fake)
    out = tmp_path / "g.json"
    versions = ["0.5.16", "0.5.17"] if code == 0 else ["0.5.17", "0.5.18"]
    argv = ["upstream", "replay", "--graph-runner", "--sglang", *versions, "--json", str(out)]
    assert workbench_main([*argv, "--cache-dir", str(tmp_path)]) == code
    assert calls == (
        [("0.5.16", False), ("0.5.16", True), ("0.5.17", False)]
        if code == 0
        else [("0.5.17", False), ("0.5.18", False)]
    )
    assert [r["verdict"] for r in json.loads(out.read_text())["records"]] == verdicts


@pytest.mark.network
@pytest.mark.skipif(os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the release wheels")
@pytest.mark.timeout(1200)
def test_the_dspark_crash_is_confirmed_on_0_5_16_and_refuted_with_the_fix_and_on_0_5_17() -> None:
    ctx = UpstreamContext(log=quiet)
    bug = runner_decision(ctx, "0.5.16")
    assert bug["verdict"] == "confirmed", bug["reason"]
    run = bug["replay"]["record"]["runs"][0]
    assert run["raised_at"] == f"{RUNNER_FILE}:531" and run["exception"] == "TypeError"
    assert run["frames"][-1]["code"] == "cuda_graph_bs = max(forward_batch.original_global_num_tokens_cpu)"
    assert any(s.startswith("DecodeCudaGraphRunner.capture stood in") for s in bug["replay"]["record"]["stand_ins"])
    assert bug["replay"]["record"]["graph_runner"]["require_mlp_tp_gather"] is True
    fixed = runner_decision(ctx, "0.5.16", fix=True)
    assert fixed["verdict"] == "refuted", fixed["reason"]
    assert fixed["replay"]["record"]["batch"]["original_global_num_tokens_cpu"] == [0, 2]
    later = runner_decision(ctx, "0.5.17")
    assert later["verdict"] == "refuted", later["reason"]
