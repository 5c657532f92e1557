"""A crash bundle's batch on real SGLang (issue 12 point 3): reader checks offline, replay live.

`write_bundle` below writes the integrator's bundle format from a real workbench crash: the
workbench's pr-24860 triton backend on a DP-padded idle batch whose request row holds real slot
numbers (as left by an earlier request on that rank). The debug engineer's writer replaces it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from workbench.cli import main as workbench_main
from workbench.debug.bundle import BundleError
from workbench.upstream.replay import bundles
from workbench.upstream.replay.bundles import bundle_case, load_bundle, reference_metadata

SLOTS = [17, 18, 19, 20, 21]  # row 0's slots from an earlier request on this rank


def write_bundle(dest: Path) -> Path:
    """crash-bundle-rank1/ from a real workbench crash (pr-24860, triton, padded IDLE, bs 2)."""
    from workbench.backends import BackendContext, create_backend
    from workbench.engine.forward_batch import ForwardBatch
    from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
    from workbench.engine.model_runner import init_metadata_for
    from workbench.mem.pool import KVCache, ReqToTokenPool
    from workbench.speculative.revisions import get_revision

    pool = ReqToTokenPool(4, 64)
    pool.req_to_token[0, : len(SLOTS)] = torch.tensor(SLOTS, dtype=pool.req_to_token.dtype)
    backend = create_backend("triton", BackendContext(pool, KVCache(1, 64, 1, 16, torch.float32), 2, 1, 16))
    rev = get_revision("pr-24860")
    spec = rev.idle_draft_extend_input(16, torch.float32, 1)
    z = torch.zeros(2, dtype=torch.int64)
    fb = ForwardBatch(
        ForwardMode.IDLE,
        2,
        z.clone(),
        z.clone(),
        z.clone(),
        torch.ones(2, dtype=torch.int64),
        z.clone(),
        req_to_token_pool=pool,
        kv_cache=backend.ctx.kv_cache,
        attn_backend=backend,
        spec_info=spec,
        capture_hidden_mode=CaptureHiddenMode.LAST,
        is_padded_idle=True,
    )
    try:
        init_metadata_for(backend, fb)
    except AttributeError as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        exception = {
            "type": type(exc).__name__,
            "message": str(exc),
            "file": frame.filename,
            "line": frame.lineno,
            "function": frame.name,
        }
    else:
        raise AssertionError("the workbench's pr-24860 triton backend did not crash")
    rows = sorted(set(fb.req_pool_indices.tolist()))
    width = int(fb.seq_lens.max())
    tensors = {
        "forward_batch.input_ids": fb.input_ids,
        "forward_batch.positions": fb.positions,
        "forward_batch.seq_lens": fb.seq_lens,
        "forward_batch.req_pool_indices": fb.req_pool_indices,
        "forward_batch.out_cache_loc": fb.out_cache_loc,
        "req_to_token.row_ids": torch.tensor(rows, dtype=torch.int64),
        "req_to_token.rows": pool.req_to_token[rows, :width].clone(),
    }
    folder = dest / "crash-bundle-rank1"
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "tensors.safetensors"))
    meta = {
        "format": "eagle-workbench-crash-bundle",
        "format_version": 1,
        "rank": 1,
        "dp": 2,
        "phase": "draft-extend",
        "forward_mode": "IDLE",
        "batch_size": 2,
        "backend": "triton",
        "attention": {
            "num_heads": 2,
            "num_kv_heads": 1,
            "head_dim": 16,
            "v_head_dim": 16,
            "num_layers": 1,
            "dtype": "float32",
            "device": "cpu",
        },
        "req_to_token_shape": list(pool.req_to_token.shape),
        "spec_info": {"module": type(spec).__module__, "class": type(spec).__name__, "fields": {}},
        "revision": "pr-24860",
        "fix_applied": False,
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "exception": exception,
        "tensors": {
            k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)} for k, v in tensors.items()
        },
    }
    (folder / "bundle.json").write_text(json.dumps(meta, indent=1))
    return folder


def test_reference_reads_the_bundles_real_slots(tmp_path: Path) -> None:
    bundle = load_bundle(write_bundle(tmp_path))
    assert bundle["meta"]["exception"]["message"] == "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
    assert reference_metadata(bundle) == {"kv_indptr": [0, 1, 2], "kv_indices": [17, 17]}
    case, batch = bundle_case(bundle)
    assert batch["rows"] == [SLOTS[:1]] and batch["req_to_token_shape"] == [4, 64]
    assert (case["spec_module"], case["spec_class"]) == ("sglang.srt.speculative.eagle_info", "EagleDraftExtendInput")
    assert (case["batch"], case["mode"], case["answer_missing"]) == ("bundle", "IDLE", False)


@pytest.mark.parametrize("damage", ["missing", "shape", "newer", "not_json"])
def test_bad_bundle_is_refused_naming_the_file(tmp_path: Path, damage: str) -> None:
    folder = write_bundle(tmp_path)
    meta_path = folder / "bundle.json"
    meta = json.loads(meta_path.read_text())
    if damage == "missing":
        (folder / "tensors.safetensors").unlink()
        expect = "tensors.safetensors: missing"
    elif damage == "shape":
        meta["tensors"]["forward_batch.seq_lens"]["shape"] = [3]
        meta_path.write_text(json.dumps(meta))
        expect = "tensor 'forward_batch.seq_lens' is int64 [2], bundle.json says int64 [3]"
    elif damage == "newer":
        meta["format_version"] = 2
        meta_path.write_text(json.dumps(meta))
        expect = "format_version 2 is newer than this workbench reads"
    else:
        meta_path.write_text("{not json")
        expect = "bundle.json: not valid UTF-8 JSON"
    with pytest.raises(BundleError, match=expect.replace("[", r"\[").replace("]", r"\]")):
        load_bundle(folder)


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: real sglang releases; WB_NETWORK_TESTS=1"
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("versions", [("0.5.13", "0.5.14")], ids=["0.5.13+0.5.14"])
def test_real_releases_on_a_workbench_bundle(versions: tuple, tmp_path: Path) -> None:
    folder = write_bundle(tmp_path)
    out = tmp_path / "replay.json"
    assert (
        workbench_main(["upstream", "replay", "--bundle", str(folder), "--sglang", *versions, "--json", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    old, new = result["releases"]["0.5.13"], result["releases"]["0.5.14"]
    assert old["status"] == "crashed" and old["same_exception_as_bundle"], old
    assert old["raised_at"].endswith("layers/attention/triton_backend.py:574")
    assert new["status"] == "ok" and new["equal_to_reference"], new
    assert new["metadata"] == {"kv_indptr": [0, 1, 2], "kv_indices": [17, 17]}


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
def test_real_releases_on_the_bundle_a_workbench_crash_wrote(tmp_path: Path) -> None:
    """The bundle the rank itself wrote (workbench.debug's writer), not one built by the test."""
    import workbench
    from workbench.debug.replay import replay_crash

    res = workbench.reproduce(
        backend="triton",
        revision="pr-24860",
        dp=2,
        dp_policy="pack",
        steps=3,
        topk=2,
        draft_tokens=4,
        max_new_tokens=8,
        prompts=["def f(x):\n"],
        timeout_s=240,
        model_dir=os.environ.get("WB_MODEL_DIR"),
    )
    assert res.status == "crashed" and res.crash.bundle, res.summary()
    folder = Path(res.crash.bundle)
    out = tmp_path / "replay.json"
    assert (
        workbench_main(
            ["upstream", "replay", "--bundle", str(folder), "--sglang", "0.5.13", "0.5.14", "--json", str(out)]
        )
        == 0
    )
    result = json.loads(out.read_text())
    old, new = result["releases"]["0.5.13"], result["releases"]["0.5.14"]
    assert old["status"] == "crashed" and old["same_exception_as_bundle"], old
    assert new["status"] == "ok" and new["equal_to_reference"], new
    ours = replay_crash(folder, fix=True)  # the workbench's own fallback on the same bundle
    assert not ours.mismatches, ours.mismatches
    assert new["metadata"] == {k: ours.metadata[k] for k in ("kv_indptr", "kv_indices")}
    assert new["metadata"] == reference_metadata(load_bundle(folder))


def test_the_shipped_bundle_replay_reads_with_each_releases_status(tmp_path: Path) -> None:
    """The shipped measurement says how each release's replay ended (0.5.13 crashed with the bundle's
    exception, 0.5.14 ok); a file written before ``status``, which said ``outcome``, reads the same."""
    got = bundles.load_shipped()["releases"]
    assert got["0.5.13"]["status"] == "crashed" and got["0.5.14"]["status"] == "ok"
    doc = json.loads(bundles.SHIPPED.read_text())
    doc["releases"] = {
        v: {("outcome" if k == "status" else k): x for k, x in r.items()} for v, r in doc["releases"].items()
    }
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    read = bundles.load_shipped(old)["releases"]
    assert read == got
    assert not any("outcome" in r for r in read.values())
