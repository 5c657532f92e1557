"""Crash bundles from elsewhere: every size and index is bounded and the batch must add up before the
replay allocates anything; every bundle the writer produces (each forward mode) still loads."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import workbench
from workbench.cli import main as workbench_main
from workbench.debug.bundle import BundleError, save_bundle
from workbench.debug.load import load_bundle
from workbench.debug.replay import replay_crash

SMALL = dict(steps=3, topk=2, draft_tokens=4, max_new_tokens=8, model_dir=os.environ.get("WB_MODEL_DIR"))


@pytest.fixture(scope="module")
def idle_bundle(tmp_path_factory) -> Path:
    """The padded IDLE draft-extend bundle of a real pr-24860 crash (triton, dp 2)."""
    os.environ["WB_BUNDLE_DIR"] = str(tmp_path_factory.mktemp("bundles"))
    try:
        res = workbench.reproduce(
            backend="triton", revision="pr-24860", dp=2, dp_policy="pack", prompts=["def f(x):\n"], **SMALL
        )
    finally:
        del os.environ["WB_BUNDLE_DIR"]
    assert res.status == "crashed" and res.crash.bundle, res.summary()
    shutil.rmtree(res.record.dp.logs, ignore_errors=True)
    return Path(res.crash.bundle)


def test_every_forward_mode_the_writer_sees_loads_and_replays(tmp_path, monkeypatch):
    """A bundle of the first forward of each (mode, model) of a dp 1 run, written as a crash would write
    it: each passes every bound and consistency check and replays with the fix."""
    from workbench.engine.model_runner import ModelRunner

    written, real = {}, ModelRunner.forward

    def forward(self, fb, hidden=None):
        key = (fb.forward_mode.name, self.is_draft)
        if key not in written:
            try:
                raise RuntimeError("probe")
            except RuntimeError as e:
                written[key] = save_bundle(
                    tmp_path / str(len(written)),
                    **dict(rank=0, dp=1, phase=str(key), revision="pr-28221", fix_applied=False),
                    runner=self,
                    forward_batch=fb,
                    exc=e,
                )
        return real(self, fb, hidden)

    monkeypatch.setattr(ModelRunner, "forward", forward)
    res = workbench.reproduce(backend="triton", revision="pr-28221", prompts=["def f(x):\n", "import os\n"], **SMALL)
    assert res.status == "ok", res.summary()
    assert {m for m, _ in written} == {"EXTEND", "DECODE", "TARGET_VERIFY", "DRAFT_EXTEND"}
    for key, path in written.items():
        out = replay_crash(load_bundle(path), fix=True)
        assert not out.mismatches, (key, out.summary())


def _copy(src: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(src, tmp_path / name / "crash-bundle-rank1"))


def _json(d: Path, edit) -> Path:
    meta = json.loads((d / "bundle.json").read_text())
    edit(meta)
    (d / "bundle.json").write_text(json.dumps(meta))
    return d


def _tensors(d: Path, **new: torch.Tensor) -> Path:
    """Replace tensors and declare them in bundle.json, so only the bounds and the batch's sums can object."""
    t = {**load_file(str(d / "tensors.safetensors")), **{k.replace("__", "."): v for k, v in new.items()}}
    save_file(t, str(d / "tensors.safetensors"))
    return _json(
        d, lambda m: m["tensors"].update({k: {"dtype": str(v.dtype)[6:], "shape": list(v.shape)} for k, v in t.items()})
    )


def test_a_huge_request_table_is_refused_before_anything_is_allocated(idle_bundle, tmp_path, capsys):
    d = _json(_copy(idle_bundle, tmp_path, "huge"), lambda m: m.update(req_to_token_shape=[2_000_000, 2_000_000]))
    with pytest.raises(BundleError, match=r"bundle\.json: req_to_token_shape rows 2000000 exceeds the limit 65536"):
        load_bundle(d)
    assert workbench_main(["debug", str(d)]) == 2
    assert "req_to_token_shape rows 2000000 exceeds the limit 65536" in capsys.readouterr().err


JSON_EDITS = {
    "columns": (lambda m: m.update(req_to_token_shape=[2, 1 << 30]), r"req_to_token_shape columns 1073741824 exceeds"),
    "table": (lambda m: m.update(req_to_token_shape=[60000, 1 << 20]), r"replay allocation .* bytes \d+ exceeds"),
    "layers": (lambda m: m["attention"].update(num_layers=10**9), r"attention\.num_layers 1000000000 exceeds"),
    "head_dim": (lambda m: m["attention"].update(head_dim=0), r"attention\.head_dim 0 is below the minimum 1"),
    "heads": (lambda m: m["attention"].update(num_heads=3), r"num_heads 3 is not a multiple of num_kv_heads 2"),
    "kv_dtype": (lambda m: m["attention"].update(dtype="int64"), r"attention\.dtype 'int64'; valid: \["),
    "batch": (lambda m: m.update(batch_size=10**7), r"batch_size 10000000 exceeds the limit 65536"),
    "dp": (lambda m: m.update(dp=0), r"dp 0 is below the minimum 1"),
    "rank": (lambda m: m.update(rank=2), r"rank 2 exceeds the limit 1 \(dp 2\)"),
    "declared": (
        lambda m: m["tensors"]["forward_batch.seq_lens"].update(shape=[1 << 20, 1 << 20]),
        r"tensor 'forward_batch\.seq_lens' elements 1099511627776 exceeds the limit 67108864",
    ),
    "omitted": (
        lambda m: m["spec_info"]["fields"].update(
            hidden_states={"kind": "tensor_omitted", "shape": [1 << 15] * 2, "dtype": "float32"}
        ),
        r"spec_info field 'hidden_states' elements 1073741824 exceeds the limit 67108864",
    ),
    "value": (
        lambda m: m["spec_info"]["fields"].update(num_tokens_per_req={"kind": "value", "value": 1 << 40}),
        r"spec_info field 'num_tokens_per_req' 1099511627776 exceeds the limit 2147483647",
    ),
    "padded": (
        lambda m: m["forward_batch"].update(is_padded_idle=False),
        r"IDLE batch of size 1 with is_padded_idle False",
    ),
    "verify": (lambda m: m.update(forward_mode="TARGET_VERIFY"), r"TARGET_VERIFY with spec_info EagleDraftExtendInput"),
}


@pytest.mark.parametrize("case", list(JSON_EDITS))
def test_a_size_beyond_its_limit_or_a_batch_that_does_not_add_up_is_refused(idle_bundle, tmp_path, case):
    edit, message = JSON_EDITS[case]
    with pytest.raises(BundleError, match=message):
        load_bundle(_json(_copy(idle_bundle, tmp_path, case), edit))


TENSOR_EDITS = {
    "slot": ({"req_to_token__rows": torch.tensor([[1 << 30]], dtype=torch.int32)}, r"KV up to slot 1073741824"),
    "negative": (
        {"forward_batch__out_cache_loc": torch.tensor([-5])},
        r"out_cache_loc slot min -5 is below the minimum 0",
    ),
    "position": (
        {"forward_batch__positions": torch.tensor([5000])},
        r"positions max 5000 exceeds the limit 511 \(req_to_token has 512 columns\)",
    ),
    "float": (
        {"forward_batch__seq_lens": torch.tensor([1.0])},
        r"seq_lens is float32 \[1\]; valid: a 1-D integer tensor",
    ),
    "columns": ({"forward_batch__seq_lens": torch.tensor([0])}, r"rows has 1 columns; the batch reads 0"),
    "tokens": (
        {f"forward_batch__{k}": torch.tensor([0, 0]) for k in ("input_ids", "positions", "out_cache_loc")},
        r"a IDLE batch has one token per row: 2 tokens, batch_size 1",
    ),
}


@pytest.mark.parametrize("case", list(TENSOR_EDITS))
def test_tensors_out_of_range_or_out_of_step_are_refused(idle_bundle, tmp_path, case):
    new, message = TENSOR_EDITS[case]
    with pytest.raises(BundleError, match=message):
        load_bundle(_tensors(_copy(idle_bundle, tmp_path, case), **new))


def test_the_genuine_bundle_still_reproduces(idle_bundle):
    with pytest.raises(AttributeError, match="has no attribute 'kv_indptr'"):
        replay_crash(idle_bundle)


def test_a_bundle_without_the_optional_forward_batch_entry_still_loads(idle_bundle, tmp_path):
    """``forward_batch`` (capture mode, is_padded_idle) is optional in format 1: checked only when given."""
    d = _json(_copy(idle_bundle, tmp_path, "no-fb"), lambda m: m.pop("forward_batch"))
    with pytest.raises(AttributeError, match="has no attribute 'kv_indptr'"):
        replay_crash(load_bundle(d))
