"""Comparisons: generation-only timing, samples named per forward, intervals and verdicts, the
acceptance sweep's agreement and grouping, device / dtype refusals (tiny runs, torch paths)."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from workbench.experiments.compare import compare
from workbench.experiments.stats import fmt_interval, paired_ratio, summarize, verdict
from workbench.experiments.sweep import agreement, findings, groups, load_shipped
from workbench.run.api import make_config, reproduce
from workbench.run.config import ConfigError
from workbench.views import plots

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(steps=3, topk=2, draft_tokens=4, prompts=["The capital of France is", "Once upon a time"], max_new_tokens=8)


def test_summaries_and_paired_ratios_carry_order_statistic_intervals_and_verdicts():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0, 5.0])
    assert s["median"] == 3.5 and s["ci"] == [1.0, 100.0] and s["coverage"] == pytest.approx(1 - 2 / 64)
    r = paired_ratio([4.0, 4.4, 3.6, 4.0, 4.2, 3.8], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert r["median"] == pytest.approx(2.0) and r["ci"] == [pytest.approx(1.8), pytest.approx(2.2)]
    assert verdict(r)["verdict"] == "faster" and verdict(paired_ratio([1.0] * 6, [2.0] * 6))["verdict"] == "slower"
    mixed = verdict(paired_ratio([1.1, 0.9, 1.2, 0.8, 1.1, 0.9], [1.0] * 6))
    assert mixed["verdict"] == "undecided" and mixed["repeats_needed"] is None and "both sides" in mixed["text"]
    short = verdict(paired_ratio([2.0, 2.1, 1.9], [1.0] * 3))  # 3 repeats: coverage 75 %, not a verdict
    assert short["verdict"] == "undecided" and short["repeats_needed"] == 6 and "75.0 %" in short["text"]
    assert "exact coverage 96.9 %, n = 6" in fmt_interval(r) and fmt_interval(r).startswith("2.00 (95 % CI")
    with pytest.raises(ValueError, match="equal lengths"):
        paired_ratio([1.0], [1.0, 2.0])


def test_tokens_per_s_covers_generation_only():
    rec = reproduce({**TINY, "backend": "torch_native"}).record
    m = rec.metrics
    assert 0 < m["generation_s"] < m["wall_s"] and m["setup_s"] > 0 and m["warmup_s"] > 0
    assert m["generation_s"] + m["setup_s"] == pytest.approx(m["wall_s"], rel=0.05)
    assert m["tokens_per_s"] == pytest.approx(m["tokens_generated"] / m["generation_s"])
    assert rec.env["device"] == "cpu"
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    assert head and rec.env["workbench_commit"] in (head, head + "+dirty")  # the code that ran, read by git
    # every forward is timed once, its metadata and attention with it; phases hold whole forwards
    verify = m["forward_s"]["target/TARGET_VERIFY"]
    assert len(verify) == len(m["latency_s"]["verify"]) == len(m["metadata_s"]["target/TARGET_VERIFY"])
    assert all(a < f for a, f in zip(m["attention_s"]["target/TARGET_VERIFY"], verify, strict=False))
    assert len(m["forward_s"]["draft/DECODE"]) == (TINY["steps"] - 1) * len(m["latency_s"]["draft"])
    assert sum(m["forward_s"]["target/TARGET_VERIFY"]) <= sum(m["latency_s"]["verify"])


def test_dp2_generation_comes_from_rank_stamps_and_keeps_idle_ranks_apart():
    rec = reproduce(
        {**TINY, "backend": "torch_native", "dp": 2, "dp_policy": "pack", "prompts": TINY["prompts"][:1]}
    ).record
    m = rec.metrics
    assert rec.status == "ok" and m["setup_s"] > m["generation_s"] > 0  # rank start is setup, not generation
    assert m["latency_s_idle"]["verify"] and m["forward_s_idle"]  # rank 1 holds nothing
    assert len(m["latency_s_idle"]["verify"]) == len(m["latency_s"]["verify"])
    assert 0 < m["warmup_s"] < m["setup_s"]  # every rank warmed up (in setup, not in generation)
    assert m["collective_s"]["forward/busy"] and set(rec.dp.rank_setup_s) == {"0", "1"}


def test_compare_reports_medians_intervals_speedup_and_verdicts(tmp_path):
    out = tmp_path / "cmp.json"
    events = []
    doc = compare(
        TINY, ["fa3", "torch_native"], repeats=2, json_out=str(out), verbose=False, on_event=lambda *e: events.append(e)
    )
    kinds = [k for k, _, _ in events]  # progress: 8 runs planned, each reports done (dp 1) and is counted
    assert [p["runs"] for k, _, p in events if k == "plan"] == [8] and kinds.count("run") == kinds.count("done") == 8
    assert json.loads(out.read_text())["schema"] == "workbench.compare/2"
    assert doc["headline"].startswith("Compared EAGLE3 (3, 2, 4) (steps, topk, draft tokens) vs greedy on fa3, ")
    assert len(doc["order"]) == 2 and all(sorted(o) == sorted(r["arm"] for r in doc["rows"]) for o in doc["order"])
    assert {(r["backend"], r["mode"]) for r in doc["rows"]} == {
        (b, m) for b in ("fa3", "torch_native") for m in ("greedy", "eagle")
    }
    for r in doc["rows"]:
        assert r["repeats"] == 2 and len(r["tokens_per_s_values"]) == 2 and len(r["outputs_sha256"]) == 1
        lo, hi = r["tokens_per_s"]["ci"]
        assert lo <= r["tokens_per_s"]["median"] <= hi
        assert r["tokens_per_s"]["median"] == statistics.median(r["tokens_per_s_values"])
        assert r["metadata_ms"] and 0 < r["attention_share"]["median"] < 1
    fa3 = next(r for r in doc["rows"] if r["backend"] == "fa3")
    assert "stand-in" in fa3["label"]
    assert all(s["lossless"] and s["speedup"]["median"] > 0 for s in doc["speedup"])
    assert all(s["speedup"]["n"] == 2 and s["verdict"]["verdict"] == "undecided" for s in doc["speedup"])  # 2 repeats
    assert len(doc["pairs"]) == 2 and all(p["ratio"]["n"] == 2 for p in doc["pairs"])
    assert all(s["repetition_loop_share"] == 0.0 for s in doc["speedup"])  # 8 tokens: too short to loop
    assert doc["headline"].endswith("greedy outputs ending in a repetition loop: 0 %.")
    for fig in (
        plots.tokens_per_s_spread(doc),
        plots.metadata_cost(doc),
        plots.speedup_intervals(doc),
        plots.attention_split(doc),
    ):
        texts = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
        texts += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert all("stand-in" in t for t in texts if t.startswith("fa3")), texts


def test_compare_refuses_a_single_repeat():
    with pytest.raises(ValueError, match="repeats 1"):
        compare(TINY, ["torch_native"], repeats=1, verbose=False)


def test_unknown_dtype_and_bf16_under_dp_are_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="invalid dtype 'float16'; valid: float32, bfloat16"):
        make_config(dtype="float16")
    with pytest.raises(ConfigError, match="invalid dtype 'bfloat16'; valid: float32 at dp 2"):
        make_config(dtype="bfloat16", dp=2)


def test_agreement_counts_identical_prompts_and_the_shared_prefix():
    a = agreement([[1, 2, 3, 4], [5, 6]], [[1, 2, 9, 4], [5, 6]])
    assert a == {"identical_prompts": 1, "prompts": 2, "prefix_share": 4 / 6}


def test_identical_backends_are_one_group_and_one_finding_line():
    row = dict(
        dtype="float32",
        setting=[3, 2, 6],
        status="ok",
        outputs_sha256="x",
        accept_length_mean=2.5,
        acceptance_per_position=[0.8, 0.5, 0.2],
    )
    rows = [{**row, "backend": b, "label": b} for b in ("torch_native", "fa3")]
    assert len(groups(rows)) == 1 and groups(rows)[0]["labels"] == ["fa3", "torch_native"]
    rows = [
        {**r, "agreement_with_fp32_greedy": {"identical_prompts": 2, "prompts": 2, "prefix_share": 1.0}} for r in rows
    ]
    assert findings(rows) == [
        "float32: all 2 backends agree exactly (same tokens, same acceptance) at every setting; "
        "one curve stands for all; every output equals the fp32 greedy output."
    ]
    rows[1] = {
        **rows[1],
        "outputs_sha256": "y",
        "agreement_with_fp32_greedy": {"identical_prompts": 1, "prompts": 2, "prefix_share": 0.75},
    }
    assert len(groups(rows)) == 2
    assert findings(rows) == [
        "float32: backends differ at 1 of 1 settings ([3, 2, 6]); outputs leave the fp32 greedy "
        "output at [3, 2, 6] (1/2 prompts identical, prefix agreement 0.75)."
    ]


def test_bfloat16_runs_and_the_shipped_sweep_is_labelled():
    rec = reproduce({**TINY, "backend": "torch_native", "dtype": "bfloat16"}).record
    assert rec.status == "ok" and rec.config["dtype"] == "bfloat16"
    shipped = load_shipped()
    assert shipped["shipped"] and shipped["measured"] and shipped["versions"]["torch"]
    settings = {tuple(r["setting"]) for r in shipped["rows"]}
    assert {(1, 1, 2), (3, 1, 4), (3, 2, 6), (5, 4, 16), (6, 10, 32)} <= settings
    assert shipped["prompts"] >= 8 and shipped["max_new_tokens"] >= 64
    assert {r["dtype"] for r in shipped["rows"]} == {"float32", "bfloat16"}


def test_the_comparison_definition_fills_only_what_a_config_leaves_unset():
    import torch

    from workbench.experiments.definition import COMPARISON, describe

    spec = {"steps": COMPARISON.steps, "topk": COMPARISON.topk, "draft_tokens": COMPARISON.draft_tokens}
    full = COMPARISON.apply({"backend": "torch_native"})
    assert full == {"backend": "torch_native", **spec, "max_new_tokens": 64, "threads": None, "max_running": 1}
    assert COMPARISON.apply({"topk": 4, "threads": 2})["threads"] == 2  # given keys stay
    line = describe(full, ["torch_native"], COMPARISON.repeats)  # None: the process's threads, said as a number
    assert f", {torch.get_num_threads()} torch thread(s) (this process's setting), dp 1," in line
    assert ", 2 torch thread(s), dp 1," in describe({**full, "threads": 2}, ["torch_native"], 6)
    assert "(this process's setting), dp 1," in describe({**full, "dp": "1"}, ["torch_native"], 6)  # as compare
    assert "setting) and the cores divided among the ranks under DP, dp 1/2," in describe(
        {**full, "dp": "1/2"}, ["torch_native"], 6
    )
    assert ", the cores divided among the ranks, dp 2," in describe({**full, "dp": 2}, ["torch_native"], 6)
    assert "steps" not in COMPARISON.apply({"topk": 4})  # the others keep the run defaults
    assert COMPARISON.repeats == 6
    make_config(full)  # a valid setting


def test_a_failed_run_is_kept_as_a_failed_row_and_the_rest_is_shown(monkeypatch):
    """fa3's EAGLE3 runs crash (the fault hook); the other configs still give rows, speedups and plots,
    the failed one is not run again, and ``workbench compare`` exits 1."""
    from workbench.cli import main
    from workbench.experiments import bench
    from workbench.experiments import compare as compare_mod
    from workbench.views import comparison

    real = bench.reproduce
    faulty = lambda cfg, **kw: real({**cfg, "fault": "raise@rank0"} if cfg["backend"] == "fa3" else cfg, **kw)  # noqa: E731
    monkeypatch.setattr(bench, "reproduce", faulty)
    records: dict = {}
    small = {**TINY, "prompts": TINY["prompts"][:1], "max_new_tokens": 4}
    doc = compare(small, ["fa3", "torch_native"], repeats=2, verbose=False, records_out=records)
    assert {(r["backend"], r["mode"]) for r in doc["rows"]} == {
        ("fa3", "greedy"),
        ("torch_native", "greedy"),
        ("torch_native", "eagle"),
    }
    assert [(f["backend"], f["mode"], f["status"]) for f in doc["failed"]] == [("fa3", "eagle", "crashed")]
    assert [s["backend"] for s in doc["speedup"]] == ["torch_native"]
    assert sorted(k for k in records if k.startswith("eagle/fa3")) == ["eagle/fa3/dp1#0"]  # not run again
    table = comparison.compare_table(doc)
    assert [r["status"].split(" ")[0] for r in table.rows] == ["ok", "ok", "ok", "crashed"]
    assert "Error" in table.rows[-1]["status"]
    for fig in (plots.tokens_per_s_spread(doc), plots.speedup_intervals(doc), plots.metadata_cost(doc)):
        assert fig.axes
    monkeypatch.setattr(compare_mod, "compare", lambda *a, **k: doc)
    assert main(["compare", "--backends", "fa3", "torch_native"]) == 1


def test_the_headline_says_how_many_repeats_would_decide_an_undecided_verdict():
    """An undecided EAGLE3/greedy pair names the repeats that would decide it at the observed split,
    or says the repeats split evenly; a decided one is just the word."""
    from workbench.experiments.compare import headline

    def row(num: list[float]) -> dict:
        r = paired_ratio(num, [1.0] * len(num))
        return {"label": "triton", "dp": 1, "speedup": r, "verdict": verdict(r), "lossless": True}

    short, even, clear = row([2.0, 2.1, 1.9]), row([1.1, 0.9, 1.2, 0.8, 1.1, 0.9]), row([2.0] * 6)
    doc = {"compared": "EAGLE3 vs greedy", "speedup": [short, even, clear]}
    text = headline(doc)
    need = short["verdict"]["repeats_needed"]
    assert need == 6 and f"undecided (about {need} repeats in all would decide)" in text
    assert "undecided (repeats split evenly around 1)" in text and "2.00 [2.00, 2.00]x faster" in text
