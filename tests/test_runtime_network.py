"""The released SGLang runtime on this CPU, end to end (network: the release's wheel and its replay
environment, cached under ~/.cache/eagle-workbench). One module-scoped run per role, shared by the
checks. Run with WB_NETWORK_TESTS=1; CI runs these for 0.5.14 and 0.5.12's V1 worker (.ci/run)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from workbench.upstream.context import UpstreamContext
from workbench.upstream.runtime.suite import between_prs_checkout

pytestmark = pytest.mark.network
VERIFY = "'EagleVerifyInput' object has no attribute 'kv_indptr'"
SEED = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
TOKENS = 8
HIDE_SEED = Path(__file__).resolve().parents[1] / "workbench/upstream/runtime/probes/hide_seed_crash.py"


def _run(**kwargs) -> dict:
    from workbench.upstream.runtime import run_runtime

    return run_runtime(UpstreamContext(), "0.5.14", max_new_tokens=TOKENS, **kwargs)


@pytest.fixture(scope="module")
def runs() -> dict:
    before = set(os.listdir(tempfile.gettempdir()))
    out = {"dp2": _run(dp=2), "dp2+verify-input": _run(dp=2, fixes=["verify-input"]), "dp1": _run(dp=1)}
    with tempfile.TemporaryDirectory(prefix="wb-between-") as tmp:
        between_prs_checkout(UpstreamContext(), "0.5.14", Path(tmp))
        out["between"] = _run(dp=2, fixes=["verify-input"], sglang_src=Path(tmp))
        out["between+fix"] = _run(dp=2, fixes=["verify-input", "pr-28221"], sglang_src=Path(tmp))
        out["between+hidden"] = _run(dp=2, fixes=["verify-input"], sglang_src=Path(tmp), extra_shims=[HIDE_SEED])
    out["new in the temp dir"] = sorted(set(os.listdir(tempfile.gettempdir())) - before)
    return out


def _no_leftovers(rec: dict) -> None:
    assert rec["processes"]["left_running"] == []
    assert rec["shim_guard"]["modules"] > 20 and rec["shim_guard"]["violations"] == []
    if rec["status"] == "ok":  # every rank held the guard again after the run, and it found nothing
        assert sorted(rec["shim_guard"]["ranks"]) == [str(r) for r in range(rec["config"]["dp"])]
        assert all(r["after_run"] for r in rec["shim_guard"]["ranks"].values())
        assert rec["shim_guard"]["after_run"]["violations"] == []
    assert not [p for p in Path(tempfile.gettempdir()).glob("wb-rt-*")], "a run folder was left in the temp dir"


def test_runtime_runs_leave_nothing_in_the_temp_dir(runs: dict) -> None:
    """The five runs (rank processes, HF references, the between-PRs checkout) leave no file or
    folder in the temp dir: the ranks and the reference get the run folder as their TMPDIR."""
    assert runs["new in the temp dir"] == []


def test_runtime_0_5_14_idle_rank_crashes_in_the_verify_pass(runs: dict) -> None:
    rec = runs["dp2"]
    c = rec["crash"]
    assert rec["status"] == "crashed" and c["message"] == VERIFY
    assert (c["rank"], c["phase"], c["forward_mode"], c["batch_size"], c["spec_info"]) == (
        1,
        "verify",
        "IDLE",
        1,
        "EagleVerifyInput",
    )
    assert c["raised_at"]["file"] == "sglang/srt/layers/attention/triton_backend.py" and c["raised_at"]["line"] == 593
    for frame in (
        "managers/scheduler.py",
        "speculative/eagle_worker_v2.py",
        "in verify",
        "runner/eager_runner.py",
        "layers/attention/triton_backend.py",
    ):
        assert frame in c["traceback"], frame
    assert rec["timings"]["ranks_s"] < 180
    _no_leftovers(rec)


def test_runtime_0_5_14_shims_name_their_lines_in_the_release(runs: dict) -> None:
    shims = {s["name"]: s for s in runs["dp2"]["shims"]}
    later = "sgl-kernel-cpu-ops"  # 0.5.23's CPU ops: its anchor is not in 0.5.14
    assert all(s["installed"] and s["upstream"] for n, s in shims.items() if n != later), shims
    assert not shims[later]["installed"] and shims[later]["reason"].startswith("not needed in sglang 0.5.14")
    assert shims["tree-verify-triton"]["upstream"] == ["sglang/srt/speculative/eagle_utils.py:221"]
    assert shims["pin-memory-cpu"]["upstream"] == ["sglang/srt/model_executor/forward_batch_info.py:1248"]


def test_runtime_0_5_14_verify_fix_equals_dp1_and_hf(runs: dict) -> None:
    fixed, dp1 = runs["dp2+verify-input"], runs["dp1"]
    assert fixed["status"] == dp1["status"] == "ok"
    assert fixed["fixes"][0]["fix"] == "verify-input" and fixed["fixes"][0]["applied"]
    assert fixed["reference"]["equal"] and dp1["reference"]["equal"]
    assert fixed["outputs"] == dp1["outputs"] and len(fixed["outputs"][0]) == TOKENS
    assert fixed["metrics"]["accept_length_mean"] > 1.5, "the EAGLE3 head must predict the target"
    _no_leftovers(fixed)


def test_runtime_between_prs_reaches_the_seed_crash_and_pr_28221_fixes_it(runs: dict) -> None:
    rec, fixed = runs["between"], runs["between+fix"]
    c = rec["crash"]
    assert rec["status"] == "crashed" and c["message"] == SEED
    assert (c["rank"], c["phase"], c["forward_mode"], c["spec_info"]) == (
        1,
        "draft-extend",
        "IDLE",
        "EagleDraftExtendInput",
    )
    assert "_draft_extend_for_decode" in c["traceback"] and "triton_backend.py" in c["traceback"]
    assert fixed["status"] == "ok" and fixed["reference"]["equal"]
    assert fixed["outputs"] == runs["dp1"]["outputs"]
    _no_leftovers(fixed)


def test_shim_guard_ends_a_run_whose_shim_hides_the_seed_crash(runs: dict) -> None:
    """A shim that sets EagleDraftExtendInput.kv_indptr = None in the ranks (the guard probe, loaded with
    --extra-shim) on the between-PRs checkout with --fix verify-input and without --fix pr-28221: the
    run that would complete ok without the seed's crash ends with status error, naming the class and
    attribute; nothing else is reported."""
    rec = runs["between+hidden"]
    assert rec["status"] == "error" and rec["crash"] is None and rec["error"]["stage"] == "shim-guard"
    assert "EagleDraftExtendInput.kv_indptr" in rec["error"]["message"]
    seen = {(v["module"], v["name"], v["kind"]) for v in rec["error"]["violations"]}
    assert seen == {
        ("sglang.srt.speculative.eagle_info", "EagleDraftExtendInput.kv_indptr", "attribute not in the source")
    }
    ranks = {v["rank"] for v in rec["error"]["violations"]}  # the first to reach set-up stops the run
    assert ranks and ranks <= {0, 1}
    assert rec["extra_shims"][0]["path"] == str(HIDE_SEED) and rec["processes"]["left_running"] == []


@pytest.fixture(scope="module")
def v1_runs() -> dict:
    from workbench.upstream.runtime.suite import run_roles

    roles = ["v1-dp1", "v1-dp2+triton-idle-fallback+verify-input", "v1-dp2+triton-idle-fallback+verify-input+pr-28221"]
    return run_roles(UpstreamContext(), "0.5.12", "triton", roles, max_new_tokens=TOKENS)


def test_runtime_0_5_12_v1_worker_reaches_the_seed_crash_and_pr_28221_fixes_it(v1_runs: dict) -> None:
    """0.5.12's V1 worker, its idle draft and verify passes let through (0.5.13's triton fallback
    backported, the verify input's field declared): the seed's crash in the release's own draft-extend."""
    rec = v1_runs["v1-dp2+triton-idle-fallback+verify-input"]
    c = rec["crash"]
    assert rec["status"] == "crashed" and c["message"] == SEED
    assert (c["rank"], c["phase"], c["forward_mode"], c["batch_size"], c["spec_info"]) == (
        1,
        "draft-extend",
        "IDLE",
        1,
        "EagleDraftExtendInput",
    )
    assert c["raised_at"]["file"] == "sglang/srt/layers/attention/triton_backend.py" and c["raised_at"]["line"] == 332
    for frame in ("speculative/eagle_worker.py", "in forward_draft_extend_after_decode", "in forward_idle"):
        assert frame in c["traceback"], frame
    assert [f["fix"] for f in rec["fixes"] if f["applied"]] == ["triton-idle-fallback", "verify-input"]
    fixed = {(f["name"], f["fix"]) for f in rec["shim_guard"]["fixed"]}  # each fix's declared change, and no other
    assert fixed == {
        ("TritonAttnBackend.init_forward_metadata", "triton-idle-fallback"),
        ("EagleVerifyInput.kv_indptr", "verify-input"),
    }
    _no_leftovers(rec)
    fixed, dp1 = v1_runs["v1-dp2+triton-idle-fallback+verify-input+pr-28221"], v1_runs["v1-dp1"]
    assert fixed["status"] == dp1["status"] == "ok"
    assert fixed["reference"]["equal"] and fixed["outputs"] == dp1["outputs"]
    _no_leftovers(fixed)


def test_runtime_cli_refuses_before_starting(capsys: pytest.CaptureFixture) -> None:
    from workbench.cli import main

    assert main(["upstream", "run", "--sglang", "0.5.99"]) == 2
    assert "0.5.99" in capsys.readouterr().err
