"""``bench`` and its speedup on synthetic run records (no engine): a known paired ratio comes out
through machine drift that an unpaired ratio of medians would not survive, non-identical outputs
turn ``lossless`` False and make ``workbench bench`` exit 1, the JSON names the interval's method
and coverage, and every repeat runs every arm once in a seeded random order."""

from __future__ import annotations

import json

import pytest

from workbench import cli
from workbench.experiments import bench as bench_mod
from workbench.experiments.bench import bench, run_paired, speedup_row
from workbench.run.record import RunRecord, RunResult

DRIFT = [1.0, 0.5, 1.6, 0.7, 1.3, 0.9]  # how busy the box was in each repeat (shared by both modes)
NOISE = [1.02, 0.97, 1.0, 1.03, 0.98, 1.01]  # EAGLE3's own run-to-run noise


def _record(cfg: dict, tps: float, sha: str) -> RunRecord:
    return RunRecord.from_json(_record_json(cfg, tps, sha))


def _record_json(cfg: dict, tps: float, sha: str) -> dict:
    return {
        "status": "ok",
        "crash": None,
        "outputs": [],
        "config": {**cfg, "kernel": "torch SDPA", "kernel_stand_in": False, "steps": 5, "topk": 1, "draft_tokens": 6},
        "env": {"triton_interpret": False, "device": "cpu", "torch_threads": 1, "workbench_commit": "abc123"},
        "metrics": {
            "tokens_per_s": tps,
            "accept_length_mean": 4.5 if cfg["mode"] == "eagle" else None,
            "acceptance_rate": 0.7 if cfg["mode"] == "eagle" else None,
            "acceptance_per_position": [0.9, 0.8],
            "repetition_loops": {"share": 0.25},
            "setup_s": 1.0,
            "latency_s": {"draft": [0.002], "verify": [0.004], "draft-extend": [0.001]}
            if cfg["mode"] == "eagle"
            else {"decode": [0.0035]},
        },
        "outputs_sha256": sha,
    }


class FakeRuns:
    """Greedy at 100 tok/s x drift, EAGLE3 at ``ratio`` x that x noise, per repeat; ``eagle_sha`` the
    outputs hash EAGLE3 reports (greedy reports "same")."""

    def __init__(self, ratio: float = 2.0, eagle_sha: str = "same") -> None:
        self.ratio, self.eagle_sha, self.calls = ratio, eagle_sha, []

    def __call__(self, cfg: dict, on_event=None) -> RunResult:
        i = sum(1 for c in self.calls if (c["mode"], c["backend"]) == (cfg["mode"], cfg["backend"]))
        self.calls.append(cfg)
        greedy = 100.0 * DRIFT[i]
        if cfg["mode"] == "greedy":
            return RunResult(_record(cfg, greedy, "same"))
        return RunResult(_record(cfg, self.ratio * greedy * NOISE[i], self.eagle_sha))


def test_a_known_paired_ratio_comes_out_through_drift(tmp_path):
    runs = FakeRuns(ratio=2.0)
    out = bench({"prompts": ["p"]}, ["torch_native"], repeats=6, json_out=str(tmp_path / "b.json"), run=runs)
    sp = out["speedup"]
    assert sp["median"] == pytest.approx(2.0 * 1.005) and sp["n"] == 6  # median of 2 x NOISE
    assert sp["ci"] == [pytest.approx(2.0 * 0.97), pytest.approx(2.0 * 1.03)] and sp["coverage"] > 0.95
    assert out["verdict"]["verdict"] == "faster" and out["lossless"] is True
    row = out["rows"][0]
    assert row["greedy_tokens_per_s"]["ci"] == [50.0, 160.0]  # the drift, which the pairing removed
    assert row["eagle_round_ms"]["round"] == pytest.approx(7.0) and row["repetition_loop_share"] == 0.25
    saved = json.loads((tmp_path / "b.json").read_text())
    assert saved["speedup"]["method"].startswith("order statistics") and saved["speedup"]["coverage"] == 0.96875
    assert "order-statistic interval" in saved["interval"] and saved["schema"] == "workbench.bench/2"
    assert saved["workbench_commit"] == "abc123"  # the commit the runs' records name


def test_the_commit_of_the_runs_is_one_commit_or_all_of_them():
    from workbench.experiments.stats import records_commit

    def rec(commit: str | None) -> RunRecord:
        env = {"workbench_commit": commit} if commit != "-" else {}
        return RunRecord("ok", {}, None, {}, [], None, env)

    assert records_commit([rec("a"), rec("a"), rec(None)]) == "a"
    assert records_commit([rec("b"), rec("a"), rec("b")]) == ["a", "b"]  # runs of different code, all named
    assert records_commit([rec(None), rec("-")]) is None


def test_speedup_row_pairs_repeat_by_repeat():
    cfg = {"backend": "fa3"}
    greedy = [_record({**cfg, "mode": "greedy"}, 100.0 * d, "s") for d in DRIFT]
    eagle = [_record({**cfg, "mode": "eagle"}, 150.0 * d, "s") for d in DRIFT]
    row = speedup_row("fa3", greedy, eagle)
    assert row["speedup"]["median"] == pytest.approx(1.5) and row["speedup"]["ci"] == [1.5, 1.5]
    slower = speedup_row("fa3", greedy, [_record({**cfg, "mode": "eagle"}, 80.0 * d, "s") for d in DRIFT])
    assert slower["verdict"]["verdict"] == "slower"


def test_outputs_that_differ_turn_lossless_false_and_the_cli_exits_1(monkeypatch, capsys):
    monkeypatch.setattr(bench_mod, "reproduce", FakeRuns(ratio=2.0, eagle_sha="different"))
    assert cli.main(["bench", "--backends", "torch_native", "--repeats", "6", "--num-prompts", "1"]) == 1
    captured = capsys.readouterr()
    assert "outputs identical: False" in captured.out and "not lossless" in captured.err
    monkeypatch.setattr(bench_mod, "reproduce", FakeRuns(ratio=2.0))
    assert cli.main(["bench", "--backends", "torch_native", "--repeats", "6", "--num-prompts", "1"]) == 0
    assert "faster (interval above 1)" in capsys.readouterr().out


def test_every_repeat_runs_every_arm_once_in_a_seeded_random_order():
    arms = [(f"{m}/{b}", {"backend": b, "mode": m}) for b in ("fa3", "torch_native") for m in ("greedy", "eagle")]
    _, order = run_paired({}, arms, repeats=6, run=FakeRuns())
    assert all(sorted(o) == sorted(a for a, _ in arms) for o in order)
    assert len({tuple(o) for o in order}) > 1  # not the same order every repeat
    assert run_paired({}, arms, repeats=6, run=FakeRuns())[1] == order  # the seed fixes it
