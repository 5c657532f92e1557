"""``workbench upstream explore`` without the network: the axes read from a stand-in release tree, the
cells and their limit reasons, the verdict of recorded run records (the shipped 0.5.23 runs), the
idle modes' rank configs, the flow with a recording stand-in for ``run_runtime``, and bad input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from workbench.upstream.context import UpstreamContext
from workbench.upstream.runtime import explore as ex
from workbench.upstream.runtime.release_run import MID_IDLE_TOKENS, _rank_configs

SHIPPED = json.loads(ex.SHIPPED_RUNS.read_text())["runs"]

SPEC_INFO = """\
from enum import Enum, auto


class SpeculativeAlgorithm(Enum):
    EAGLE = auto()
    EAGLE3 = auto()
    NGRAM = auto()
    UNO = auto()
    MEDUSA = auto()
    NONE = auto()
"""
SPECULATIVE_HOOK = """\
def _disable_overlap_schedule_for_cpu(server_args):
    pass


def _handle_uno(server_args):
    if not cfg.device.startswith("cuda"):
        raise ValueError("UNO only supports CUDA.")


def _handle_eagle_family(server_args):
    _disable_overlap_schedule_for_cpu(server_args)


def _handle_ngram(server_args):
    _disable_overlap_schedule_for_cpu(server_args)
"""
CHOICES = """\
ATTENTION_BACKEND_CHOICES = [
    # Common
    "triton",
    "torch_native",
    "flex_attention",
    # NVIDIA specific
    "fa3",
    # AMD specific
    "aiter",
    # Other platforms
    "intel_amx",
]
"""


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A stand-in release tree holding only the files ``explore`` reads, laid out as 0.5.23's."""
    files = {
        "speculative/spec_info.py": SPEC_INFO,
        "arg_groups/choices.py": CHOICES,
        "arg_groups/speculative_hook.py": SPECULATIVE_HOOK,
    }
    for rel, text in files.items():
        path = tmp_path / "sglang" / "srt" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_axes_are_read_from_the_release(release: Path) -> None:
    axes = ex.read_axes(release)
    assert axes.algorithms == {
        "EAGLE": "speculative/spec_info.py:5",
        "EAGLE3": "speculative/spec_info.py:6",
        "NGRAM": "speculative/spec_info.py:7",
        "UNO": "speculative/spec_info.py:8",
        "MEDUSA": "speculative/spec_info.py:9",
    }  # NONE is no speculative algorithm
    assert list(axes.backends) == ["triton", "torch_native", "flex_attention", "fa3", "aiter", "intel_amx"]
    assert axes.backends["fa3"] == {"line": "arg_groups/choices.py:7", "section": "NVIDIA specific"}


def test_axes_unreadable_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "sglang" / "srt" / "speculative").mkdir(parents=True)
    (tmp_path / "sglang" / "srt" / "speculative" / "spec_info.py").write_text("X = 1\n")
    with pytest.raises(ex.ExploreError, match="cannot read the release's axes"):
        ex.read_axes(tmp_path)


def test_cells_cover_every_axis_value(release: Path) -> None:
    cells = ex.enumerate_cells(ex.read_axes(release))
    keys = [c.key for c in cells]
    # one limit cell per algorithm and backend the lane cannot run, never dropped
    assert "UNO/*/*/*/*" in keys and "MEDUSA/*/*/*/*" in keys
    for b in ("flex_attention", "fa3", "aiter", "intel_amx"):
        assert f"*/{b}/*/*/*" in keys
    # EAGLE3, EAGLE and NGRAM are run; per backend: dp 1 (no idle rank: start only) x 2 overlap + dp 2, 3 x
    # (start, mid) x 2 overlap = 10
    assert {c.algorithm for c in cells if c.verdict is None} == {"EAGLE", "EAGLE3", "NGRAM"}
    run = [c for c in cells if c.algorithm == "EAGLE3"]
    assert len(run) == 2 * 10
    assert {(c.dp, c.idle) for c in run} == {(1, "start"), (2, "start"), (2, "mid"), (3, "start"), (3, "mid")}
    assert {c.overlap for c in run} == {True, False}
    assert len(set(keys)) == len(keys)
    assert all(c.verdict is None for c in run)  # every runnable cell is run, none predicted


def test_limit_reasons_name_the_line(release: Path) -> None:
    axes = ex.read_axes(release)
    assert "arg_groups/choices.py:7, under '# NVIDIA specific'" in ex.backend_limit("fa3", axes.backends["fa3"])
    assert "CUDA-only" in ex.backend_limit("fa3", axes.backends["fa3"])
    assert "ROCm-only" in ex.backend_limit("aiter", axes.backends["aiter"])
    assert "sgl_kernel's CPU build" in ex.backend_limit("intel_amx", axes.backends["intel_amx"])
    assert "run_runtime drives (triton, torch_native)" in ex.backend_limit(
        "flex_attention", axes.backends["flex_attention"]
    )
    assert ex.backend_limit("triton", axes.backends["triton"]) is None
    for lane in ("EAGLE3", "EAGLE", "NGRAM"):
        assert ex.algorithm_limit(lane, axes.algorithms[lane], release) is None
    # the release line that stops it on CPU, found in the release
    uno = ex.algorithm_limit("UNO", axes.algorithms["UNO"], release)
    assert uno.startswith("arg_groups/speculative_hook.py:7: release: _handle_uno raises")
    # an algorithm the lane has no entry for is the lane's own limit, named as such
    medusa = ex.algorithm_limit("MEDUSA", axes.algorithms["MEDUSA"], release)
    assert medusa.startswith("lane: the release defines MEDUSA (speculative/spec_info.py:9)")
    assert "EAGLE3, EAGLE, STANDALONE, NGRAM" in medusa


def test_classify_shipped_records() -> None:
    known = ex.known_crashes("0.5.23")
    reports = {
        f"upstream report {p.parent.name.removesuffix('-0.5.23')}"
        for p in ex.SHIPPED_REPORTS.glob("*-0.5.23/result.json")
    }
    assert len(reports) >= 5
    assert {k["role"] for k in known} == {
        "0.5.23/triton/dp2",
        "0.5.23/triton/between+verify-input",
        "0.5.23/triton/eagle-dp2",
        *reports,
    }
    # an upstream-ready report's as-released crash is known: the DP 3 EAGLE head split's draft decode
    split = next(k for k in known if k["role"] == "upstream report eagle-draft-dp-attention-head-split")
    assert (split["exception_type"], split["phase"], split["line"]) == ("ZeroDivisionError", "draft", 125)
    assert ex.known_crashes("0.5.23", reports=ex.SHIPPED_REPORTS / "absent") == known[: len(known) - len(reports)]
    # the idle rank's IDLE batch during the others' prefill names no pass: the report's prefill crash at that line
    idle = {"rank": 1, "phase": None, "forward_mode": "IDLE", "batch_size": 0, "exception_type": "NotImplementedError"}
    rec = copy.deepcopy(SHIPPED["0.5.23/triton/dp2"])
    rec["crash"].update(
        idle, message="", raised_at={"file": "sglang/srt/layers/attention/base_attn_backend.py", "line": 288}
    )
    got = ex.classify(rec, known)
    assert got["known"] and got["known_as"] == "upstream report torch-native-dp-fill-value", got
    rec["crash"]["phase"] = "verify"  # a named pass other than the report's is another crash
    assert ex.classify(rec, known)["known"] is False
    crash = ex.classify(SHIPPED["0.5.23/triton/dp2"], known)
    assert crash["verdict"] == "crashed" and crash["known"] and crash["known_as"] == "0.5.23/triton/dp2"
    assert crash["crash"]["rank"] == 1 and crash["crash"]["phase"] == "verify"
    assert crash["crash"]["forward_mode"] == "IDLE"
    assert (crash["crash"]["file"], crash["crash"]["line"]) == ("sglang/srt/layers/attention/triton_backend.py", 891)
    assert ex.classify(SHIPPED["0.5.23/triton/dp1"], known)["verdict"] == "ok"
    # the same crash on a release with no shipped record of it is new
    assert ex.classify(SHIPPED["0.5.23/triton/dp2"], ex.known_crashes("0.5.22"))["known"] is False


def test_classify_other_verdicts() -> None:
    ok = copy.deepcopy(SHIPPED["0.5.23/triton/dp1"])
    ok["reference"]["equal"], ok["reference"]["first_difference"] = False, {"prompt": 0, "position": 3}
    assert ex.classify(ok, [])["verdict"] == "failed"
    ok["limits"] = ["the release's CPU engine chose the QLEN_ONLY verify tree mask"]
    assert ex.classify(ok, []) == {"verdict": "limit", "reason": ok["limits"][0]}
    err = copy.deepcopy(SHIPPED["0.5.23/triton/dp1"])
    err.update(status="error", error={"stage": "scheduler", "message": "AssertionError: 256 is not divisible by 3"})
    assert ex.classify(err, []) == {
        "verdict": "limit",
        "reason": "set-up error at scheduler: AssertionError: 256 is not divisible by 3",
    }
    # a set-up error names the release line it was raised at (the innermost frame inside sglang)
    err["error"]["traceback"] = (
        'Traceback (most recent call last):\n  File "/w/rank.py", line 9, in main\n'
        '  File "/c/src/sglang-0.5.23/sglang/srt/arg_groups/speculative_hook.py", line 1082, in _handle_eagle_family\n'
        '  File "/c/env/lib/python3.11/site-packages/x.py", line 3, in f\nValueError: no dp attention\n'
    )
    assert ex.classify(err, [])["reason"].endswith("(sglang/srt/arg_groups/speculative_hook.py:1082)")
    err["error"]["stage"] = "event_loop"
    assert ex.classify(err, [])["verdict"] == "failed"
    # a shim-guard violation is our tooling changing the release: failed, never a limit, at any stage
    guard = {"stage": "shim-guard", "message": "the shim guard found protected code changed: m:C.x (missing)"}
    err.update(status="error", error=guard)
    assert ex.classify(err, []) == {"verdict": "failed", "reason": f"error at shim-guard: {guard['message']}"}
    err.update(status="timeout", error={"stage": "run", "message": "no result within 240 s"})
    assert ex.classify(err, [])["verdict"] == "failed"


def test_new_crash_gets_a_reproducer() -> None:
    cell = ex.Cell("EAGLE3", "triton", 2, "mid", False)
    rec = copy.deepcopy(SHIPPED["0.5.23/triton/dp2"])
    rec["crash"]["raised_at"]["line"] = 999
    ex._apply(cell, ex.classify(rec, ex.known_crashes("0.5.23")), "0.5.23", 8)
    assert cell.verdict == "crashed" and cell.known is False
    assert cell.reproducer == (
        "workbench upstream run --sglang 0.5.23 --dp 2 --backend triton --idle mid --disable-overlap-schedule "
        "--max-new-tokens 8 --json OUT"
    )
    ngram = ex.Cell("NGRAM", "torch_native", 1, "start", True)
    assert ex.reproducer("0.5.23", ngram, 8) == (
        "workbench upstream run --sglang 0.5.23 --dp 1 --backend torch_native --speculative-algorithm NGRAM "
        "--max-new-tokens 8 --json OUT"
    )
    known = ex.Cell("EAGLE3", "triton", 2, "start", True)
    ex._apply(known, ex.classify(SHIPPED["0.5.23/triton/dp2"], ex.known_crashes("0.5.23")), "0.5.23", 8)
    assert known.reproducer is None


def test_idle_modes_rank_configs(tmp_path: Path) -> None:
    cfg = {
        "sglang": "0.5.23",
        "dp": 3,
        "steps": 3,
        "topk": 1,
        "draft_tokens": 4,
        "backend": "triton",
        "max_new_tokens": 8,
        "disable_overlap_schedule": False,
        "fixes": [],
    }
    start = _rank_configs({**cfg, "idle": "start"}, tmp_path, [[1, 2]], tmp_path)
    assert [bool(c["requests"]) for c in start] == [True, False, False]
    mid = _rank_configs({**cfg, "idle": "mid"}, tmp_path, [[1, 2]], tmp_path)
    assert [bool(c["requests"]) for c in mid] == [True, True, True]
    assert [c["max_new_tokens"] for c in mid] == [8, 8, MID_IDLE_TOKENS]  # the last rank goes idle, two stay busy
    assert mid[0]["server_args"]["tp_size"] == mid[0]["server_args"]["dp_size"] == 3


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, release: Path) -> list:
    """``explore`` on the stand-in tree, with ``run_runtime`` answered from recorded records (calls listed)."""
    calls: list = []
    monkeypatch.setattr(ex, "known_releases", lambda ctx: ["0.5.22", "0.5.23"])
    monkeypatch.setattr(ex, "ensure_sources", lambda ctx, v: release)

    def fake_run(
        ctx, version, dp, backend, algorithm, max_new_tokens, reference, disable_overlap_schedule, timeout_s, idle
    ):
        calls.append((dp, backend, idle, not disable_overlap_schedule))
        if algorithm != "EAGLE3":
            calls[-1] += (algorithm,)
        if dp == 1:
            rec = copy.deepcopy(SHIPPED["0.5.23/triton/dp1"])
        elif dp == 3:
            rec = copy.deepcopy(SHIPPED["0.5.23/triton/dp1"])
            rec.update(status="error", error={"stage": "scheduler", "message": "AssertionError: 256 % 3"})
        else:
            rec = copy.deepcopy(SHIPPED["0.5.23/triton/dp2"])
        for key, t in rec["timings"].items():  # a release that honours the flag (the shipped 0.5.23 runs did not)
            if key.startswith("rank") and isinstance(t, dict):
                t["enable_overlap"] = not disable_overlap_schedule
        return rec

    monkeypatch.setattr(ex, "run_runtime", fake_run)
    monkeypatch.setattr(
        ex,
        "_hf_reference",
        lambda *a: {
            "outputs": SHIPPED["0.5.23/triton/dp1"]["outputs"],
            "transformers": "x",
            "architecture": "Qwen3ForCausalLM",
        },
    )
    return calls


def test_explore_flow(offline: list) -> None:
    seen: list = []
    total: list = []
    result = ex.explore(
        UpstreamContext(),
        "0.5.23",
        backends=["triton", "fa3"],
        algorithms=["EAGLE3"],
        progress=seen.append,
        on_cells=total.append,
    )
    cells = {c["key"]: c for c in result["cells"]}
    assert total == [len(cells)] and len(seen) == len(cells)
    assert cells["EAGLE3/triton/dp1/start/overlap-on"]["verdict"] == "ok"
    assert cells["EAGLE3/triton/dp2/mid/overlap-off"]["verdict"] == "crashed"
    assert cells["EAGLE3/triton/dp2/mid/overlap-off"]["known"] is True
    assert cells["EAGLE3/triton/dp3/start/overlap-on"]["verdict"] == "limit"
    # the mid cell shares its start twin's set-up error without a run of its own
    assert cells["EAGLE3/triton/dp3/mid/overlap-on"]["reason"].startswith("as EAGLE3/triton/dp3/start/overlap-on")
    assert (3, "triton", "mid", True) not in offline and (3, "triton", "start", True) in offline
    assert len(offline) == 2 + 4 + 2  # dp 1 x 2, dp 2 x 4, dp 3 start x 2
    assert cells["*/fa3/*/*/*"]["verdict"] == "limit"
    assert result["counts"] == {"ok": 2, "crashed": 4, "limit": 5, "failed": 0}
    assert json.loads(json.dumps(result)) == result


def test_overlap_turned_off_by_the_release_is_measured_once(offline: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first overlap-on cell of an algorithm runs; when the release's scheduler reports the overlap schedule
    off (0.5.23 on CPU), that cell is a limit naming the release line, with its run's verdict, and the
    algorithm's other overlap-on cells are limits as that cell, not run."""
    run = ex.run_runtime

    def overlap_off(*a, **k):
        rec = run(*a, **k)
        for key, t in rec["timings"].items():
            if key.startswith("rank") and isinstance(t, dict):
                t["enable_overlap"] = False
        return rec

    monkeypatch.setattr(ex, "run_runtime", overlap_off)
    result = ex.explore(UpstreamContext(), "0.5.23", backends=["triton", "torch_native"], algorithms=["EAGLE3"])
    cells = {c["key"]: c for c in result["cells"]}
    witness = cells["EAGLE3/triton/dp1/start/overlap-on"]
    assert witness["verdict"] == "limit" and witness["record"] is not None
    assert witness["reason"].startswith("arg_groups/speculative_hook.py:1: the release turns the overlap schedule off")
    assert witness["reason"].endswith("as overlap-off: ok: outputs equal to HF transformers' greedy tokens")
    other = cells["EAGLE3/torch_native/dp2/mid/overlap-on"]
    assert other["verdict"] == "limit" and other["record"] is None
    assert other["reason"].startswith("as EAGLE3/triton/dp1/start/overlap-on: the release turns the overlap")
    assert [c for c in offline if c[3]] == [(1, "triton", "start", True)]  # one overlap-on run in all
    assert cells["EAGLE3/torch_native/dp1/start/overlap-off"]["verdict"] == "ok"
    # another algorithm whose handler calls the same override is decided by that measured cell, with its line
    both = ex.explore(UpstreamContext(), "0.5.23", backends=["triton"], algorithms=["EAGLE3", "NGRAM"], dps=[1])
    ngram = next(c for c in both["cells"] if c["key"] == "NGRAM/triton/dp1/start/overlap-on")
    assert ngram["record"] is None and ngram["reason"] == (
        "as EAGLE3/triton/dp1/start/overlap-on: the release turns the overlap schedule off here (NGRAM's handler "
        "calls the same override at arg_groups/speculative_hook.py:15); not run"
    )
    assert ex.calls_overlap_off(ex.ensure_sources(None, "0.5.23"), "UNO") is None  # no lane handler


def test_parts_merge_into_one_exploration(offline: list) -> None:
    """Parts run as separate processes (algorithm subsets) give one exploration: a shared backend limit once,
    the counts recomputed, each part's provenance kept; parts of two releases are refused."""
    a = ex.explore(UpstreamContext(), "0.5.23", backends=["triton", "fa3"], algorithms=["EAGLE3"], dps=[1])
    b = ex.explore(UpstreamContext(), "0.5.23", backends=["triton", "fa3"], algorithms=["UNO"], dps=[1])
    merged = ex.merge([a, b])
    keys = [c["key"] for c in merged["cells"]]
    assert keys.count("*/fa3/*/*/*") == 1 and "UNO/*/*/*/*" in keys and "EAGLE3/triton/dp1/start/overlap-on" in keys
    assert merged["counts"] == {o: sum(1 for c in merged["cells"] if c["verdict"] == o) for o in ex.VERDICTS}
    assert [p["cells"] for p in merged["provenance"]["parts"]] == [len(a["cells"]), len(b["cells"])]
    with pytest.raises(ex.ExploreError, match="parts of one release"):
        ex.merge([a, {**b, "sglang": "0.5.22"}])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"backends": ["bogus"]}, ["bad backend ['bogus'] for sglang 0.5.23", "triton, torch_native"]),
        ({"algorithms": ["EAGLE4"]}, ["bad algorithm ['EAGLE4']", "EAGLE, EAGLE3, NGRAM, UNO, MEDUSA"]),
        ({"dps": [4]}, ["bad dp [4]", "1, 2, 3"]),
    ],
)
def test_bad_input_before_any_run(offline: list, kwargs: dict, words: list[str]) -> None:
    with pytest.raises(ex.ExploreError) as err:
        ex.explore(UpstreamContext(), "0.5.23", **kwargs)
    for w in words:
        assert w in str(err.value)
    assert offline == []


def test_bad_release_and_cli_exit_code(offline: list, capsys: pytest.CaptureFixture) -> None:
    from workbench.cli import main
    from workbench.upstream.sources.releases import ReleaseError

    with pytest.raises(ReleaseError, match="'9.9.9'"):
        ex.explore(UpstreamContext(), "9.9.9")
    assert main(["upstream", "explore", "--sglang", "0.5.23", "--backends", "bogus"]) == 2
    assert "bad backend ['bogus']" in capsys.readouterr().err
    assert offline == []


def test_view(offline: list) -> None:
    from workbench.views.runtime_explore import explore_html, explore_summary, explore_table

    result = ex.explore(UpstreamContext(), "0.5.23", backends=["triton"], algorithms=["EAGLE3", "UNO"], dps=[2])
    table = explore_table(result)
    row = next(r for r in table.rows if r["cell"] == "EAGLE3/triton/dp2/start/overlap-on")
    assert row["where"] == "rank 1 verify IDLE bs 1 sglang/srt/layers/attention/triton_backend.py:891"
    assert row["known"] == "known"
    page = explore_html(result)
    assert page.startswith("<!doctype html>") and "EAGLE3/triton/dp2/mid/overlap-off" in page
    summary = {r["algorithm"]: r for r in explore_summary(result).rows}
    assert summary["EAGLE3"] == {"algorithm": "EAGLE3", "ok": 0, "crashed": 4, "limit": 0, "failed": 0, "run": 4}
    assert summary["UNO"]["limit"] == 1 and summary["UNO"]["run"] == 0


def test_a_cell_written_before_verdict_reads_as_one() -> None:
    """An exploration written when a cell's verdict was called ``outcome`` (runtime_explore.json as shipped at c461edd,
    old --merge parts) reads, word for word, as ``verdict``; a word outside ``VERDICTS`` is refused,
    naming the valid ones."""
    shipped = json.loads(ex.SHIPPED_EXPLORE.read_text())["cells"]
    assert all("verdict" in c and "outcome" not in c for c in shipped)  # the file as shipped now
    raw = [{("outcome" if k == "verdict" else k): v for k, v in c.items()} for c in shipped]  # as written before
    read = [ex.read_cell(c) for c in raw]
    assert [c["verdict"] for c in read] == [c["outcome"] for c in raw] and not any("outcome" in c for c in read)
    assert ex.read_cell({"key": "k", "verdict": "limit"}) == {"key": "k", "verdict": "limit"}
    with pytest.raises(ex.ExploreError, match=r"cell 'k': verdict 'passed'; valid: ok, crashed, limit, failed"):
        ex.read_cell({"key": "k", "outcome": "passed"})


def test_shipped_exploration_reclassifies() -> None:
    """The shipped 0.5.23 exploration: labelled, counted, and each run cell's verdict what ``classify``
    gives its recorded run record today."""
    shipped = ex.load_shipped()
    assert shipped["source"].startswith("shipped: sglang 0.5.23, 2026-")
    cells = shipped["cells"]
    assert shipped["counts"] == {o: sum(1 for c in cells if c["verdict"] == o) for o in ex.VERDICTS}
    ran = [c for c in cells if c["record"] is not None]
    assert ran, "the shipped exploration ran no cell"
    known = ex.known_crashes("0.5.23")  # the shipped runs it ran after (runtime_runs.json)
    for c in ran:
        got = ex.classify(c["record"], known)
        if c["overlap"] is True and ex.overlap_turned_off(c["record"]):  # a limit, with its run's verdict
            assert c["verdict"] == "limit" and f"as overlap-off: {got['verdict']}: " in c["reason"], c["key"]
            continue
        assert (got["verdict"], got.get("known")) == (c["verdict"], c["known"]), c["key"]
        assert c["record"]["processes"]["left_running"] == []
        if c["verdict"] == "crashed":
            assert c["record"]["crash"]["traceback"] and (c["known"] or c["reproducer"])
