"""The released SGLang runtime on this CPU, end to end (network: the release's wheel and its replay
environment, cached under ~/.cache/eagle-workbench). One module-scoped run per role, shared by the
checks. Run with WB_NETWORK_TESTS=1; .ci/run runs the 0.5.14 and 0.5.23 ones, and 0.5.12's V1 worker
runs in the nightly workflow's network shards."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from upstream_fixtures import in_release

from workbench.upstream.context import UpstreamContext
from workbench.upstream.runtime.suite import between_prs_checkout

pytestmark = pytest.mark.network
VERIFY = "'EagleVerifyInput' object has no attribute 'kv_indptr'"
SEED = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
TOKENS = 8
HIDE_SEED = Path(__file__).resolve().parents[3] / "workbench/upstream/runtime/probes/hide_seed_crash.py"


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


# 0.5.23: the device equivalences' values on the release's own objects, and its three runs.
EQUIVALENCE_PROBE = """
import dataclasses, json, types
{boot}from wb_upstream.in_release import shims
shims.apply("0.5.23")
import torch
from wb_upstream.runtime import equivalences
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.model_executor import forward_batch_info as fbi
from sglang.srt.speculative import eagle_utils


def idle_batch():  # an empty IDLE ForwardBatch, as an idle DP rank holds before the padding
    fb = object.__new__(fbi.ForwardBatch)
    for f in dataclasses.fields(fbi.ForwardBatch):
        value = None
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        object.__setattr__(fb, f.name, value)
    fb.forward_mode, fb.batch_size, fb.seq_lens_sum = fbi.ForwardMode.IDLE, 0, 0
    for name in ("input_ids", "positions", "req_pool_indices", "seq_lens", "seq_lens_cpu", "out_cache_loc"):
        setattr(fb, name, torch.empty(0, dtype=torch.int64))
    return fb


runner = types.SimpleNamespace(attn_backend=object.__new__(TritonAttnBackend))  # the release's class
eqs = {{e.name: e for e in equivalences.EQUIVALENCES}}
fill, mask = eqs["dp-padding-fill-value"], eqs["verify-tree-mask-mode"]
cpu_mode = eagle_utils.default_tree_mask_mode().name
try:
    idle_batch()._pad_inputs_to_size(runner, 2, 2)
    cpu_pad = "padded"
except AttributeError as exc:
    cpu_pad = str(exc)
applied = equivalences.apply("0.5.23")
fb = idle_batch()
fb._pad_inputs_to_size(runner, 2, 2)
print(json.dumps({{
    "applied": applied,
    "cpu_mode": cpu_mode,
    "cpu_pad": cpu_pad,
    "mode": eagle_utils.default_tree_mask_mode().name,
    "cuda_mode": eval(mask.cuda_branch, vars(eagle_utils)).name,
    "seq_lens": fb.seq_lens.tolist(),
    "seq_lens_sum": fb.seq_lens_sum,
    "cuda_fill": eval(fill.cuda_branch, {{"model_runner": runner}}),
    "module_flags": [fbi._is_cpu, eagle_utils._is_cpu],
}}))
"""


def test_runtime_0_5_23_equivalences_equal_the_cuda_branch_on_the_release(tmp_path: Path) -> None:
    """On 0.5.23's own objects: the CPU branch raises (fill value) or picks QLEN_ONLY; with the
    equivalences the padded seq_lens hold the CUDA branch's value (triton: 1) and the mode is the CUDA
    branch's FULL_MASK, both evaluated here from the expressions the equivalences name."""
    import subprocess

    from workbench.upstream.in_release import shims
    from workbench.upstream.runtime.release_run import TREE_KERNELS_FILE
    from workbench.upstream.sources.envs import ensure_env, ensure_sources

    ctx = UpstreamContext()
    env = ensure_env(ctx, "0.5.23")
    script = EQUIVALENCE_PROBE.format(boot=in_release(str(env.src_root)))
    settings = {"SGLANG_USE_CPU_ENGINE": "1", "TRITON_INTERPRET": "1", "TORCH_COMPILE_DISABLE": "1"}
    tree = {shims.SPEC_TREE_ENV: str(ensure_sources(ctx, "0.5.23") / TREE_KERNELS_FILE)}
    proc = subprocess.run(
        [str(env.python), "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, **settings, **tree, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["cpu_mode"] == "QLEN_ONLY"
    assert got["cpu_pad"] == "'TritonAttnBackend' object has no attribute 'get_cpu_graph_seq_len_fill_value'"
    assert got["mode"] == got["cuda_mode"] == "FULL_MASK"
    assert got["cuda_fill"] == 1 and got["seq_lens"] == [1, 1] and got["seq_lens_sum"] == 2
    assert got["module_flags"] == [True, True]
    upstream = {a["name"]: a["upstream"] for a in got["applied"] if a["installed"]}
    assert upstream == {
        "dp-padding-fill-value": ["sglang/srt/model_executor/forward_batch_info.py:2013-2017"],
        "verify-tree-mask-mode": ["sglang/srt/speculative/eagle_utils.py:135"],
    }


@pytest.fixture(scope="module")
def runs_0_5_23() -> dict:
    from workbench.upstream.runtime import run_runtime

    ctx = UpstreamContext()
    return {
        "dp1": run_runtime(ctx, "0.5.23", dp=1, max_new_tokens=TOKENS),
        "dp2": run_runtime(ctx, "0.5.23", dp=2, max_new_tokens=TOKENS),
        "dp2+verify-input": run_runtime(ctx, "0.5.23", dp=2, fixes=["verify-input"], max_new_tokens=TOKENS),
    }


def test_runtime_0_5_23_dp1_equals_hf_with_the_equivalences_listed(runs_0_5_23: dict) -> None:
    rec = runs_0_5_23["dp1"]
    assert rec["status"] == "ok" and rec["reference"]["equal"] and rec["limits"] == []
    assert [(e["name"], e["installed"]) for e in rec["equivalences"]] == [
        ("dp-padding-fill-value", True),
        ("verify-tree-mask-mode", True),
    ]
    assert rec["timings"]["rank0"]["tree_mask_mode"] == "FULL_MASK"
    _no_leftovers(rec)


def test_runtime_0_5_23_idle_rank_crashes_at_the_guards_read(runs_0_5_23: dict) -> None:
    """The guard's live 0.5.23 finding (EagleVerifyInput.kv_indptr read at triton_backend.py:891),
    raised by the released runtime itself on the idle rank's verify pass."""
    rec = runs_0_5_23["dp2"]
    c = rec["crash"]
    assert rec["status"] == "crashed" and c["message"] == VERIFY
    assert (c["rank"], c["phase"], c["forward_mode"], c["batch_size"], c["spec_info"]) == (
        1,
        "verify",
        "IDLE",
        1,
        "EagleVerifyInput",
    )
    assert c["raised_at"]["file"] == "sglang/srt/layers/attention/triton_backend.py" and c["raised_at"]["line"] == 891
    assert "runner/eager_runner.py" in c["traceback"] and "in _execute_idle" in c["traceback"]
    assert rec["timings"]["ranks_s"] < 180
    _no_leftovers(rec)


def test_runtime_0_5_23_verify_fix_equals_dp1_and_hf(runs_0_5_23: dict) -> None:
    fixed, dp1 = runs_0_5_23["dp2+verify-input"], runs_0_5_23["dp1"]
    assert fixed["status"] == "ok" and fixed["reference"]["equal"]
    assert fixed["outputs"] == dp1["outputs"] and len(fixed["outputs"][0]) == TOKENS
    _no_leftovers(fixed)
