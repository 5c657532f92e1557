"""Crash bundles: written by the failing rank, replayed in-process to the same frame, fixed against
an independent reference, and refused when bad."""

from __future__ import annotations

import json
import os
import re
import shutil
import traceback
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import workbench
from workbench.cli import main as workbench_main
from workbench.debug.bundle import BundleError
from workbench.debug.load import load_bundle
from workbench.debug.replay import replay_crash
from workbench.views.display import class_fields, run_all, text_diff

SMALL = dict(
    steps=3,
    topk=2,
    draft_tokens=4,
    max_new_tokens=8,
    model_dir=os.environ.get("WB_MODEL_DIR"),
    timeout_s=240,
    dp_policy="pack",
    prompts=["def f(x):\n"],
)
MESSAGE = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
CASES = [(b, dp) for b in ("triton", "flashinfer") for dp in (2, 3)]


def innermost_frame(tb_text: str):
    """(file, line) of the last ``File "...", line N`` of a formatted traceback."""
    return [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', tb_text)][-1]


@pytest.fixture(scope="module")
def events():
    return []


@pytest.fixture(scope="module")
def crashes(events):
    """One pr-24860 crash per (backend, dp): dp - 1 idle ranks, each with a bundle. Run under the
    notebooks' progress bar, its ``on_event`` also recording what the ranks report."""

    def job(b: str, dp: int):
        def run(on_event):
            def both(*e):
                events.append(e)
                on_event(*e)

            return workbench.reproduce(backend=b, revision="pr-24860", dp=dp, on_event=both, **SMALL)

        return run

    runs = run_all({(b, dp): job(b, dp) for b, dp in CASES})
    yield runs
    for res in runs.values():
        shutil.rmtree(res.record.dp.logs, ignore_errors=True)


@pytest.mark.parametrize("backend,dp", CASES)
def test_replay_raises_at_the_ranks_frame_and_the_fix_matches_the_reference(crashes, backend, dp):
    res = crashes[(backend, dp)]
    assert res.status == "crashed", res.summary()
    failures = [c for c in res.record.dp.rank_failures if c.exception_type == "AttributeError"]
    assert {c.rank for c in failures} >= {1}
    for crash in failures:
        assert crash.bundle and Path(crash.bundle).name == f"crash-bundle-rank{crash.rank}"
        size = sum(p.stat().st_size for p in Path(crash.bundle).iterdir())
        assert size < 8192, f"the padded idle batch's bundle is {size} bytes"
        with pytest.raises(AttributeError) as info:
            replay_crash(crash.bundle)
        assert str(info.value) == crash.message == MESSAGE
        last = traceback.extract_tb(info.value.__traceback__)[-1]
        assert (last.filename, last.lineno) == innermost_frame(crash.traceback)
        assert "spec_info.kv_indptr" in last.line
        fixed = replay_crash(crash.bundle, fix=True)
        assert fixed.fix and fixed.matches_reference is True, fixed.summary()
        assert fixed.metadata["kv_indptr"] == fixed.reference["kv_indptr"] == [0, 1]
        assert fixed.metadata["kv_indices"] == fixed.reference["kv_indices"]
    assert not workbench.is_fix_applied(), "replay with fix=True must leave the class as it found it"


def test_run_result_replay_and_apply_fix_take_the_fallback(crashes):
    res = crashes[("triton", 2)]
    with pytest.raises(AttributeError, match="kv_indptr"):
        res.replay_crash()
    workbench.apply_fix()
    try:
        assert res.replay_crash().matches_reference is True
    finally:
        workbench.undo_fix()


def test_fix_metadata_reads_the_bundles_rows(crashes):
    """The fallback's indices come from the bundle's req_to_token rows (not a constant)."""
    b = load_bundle(crashes[("flashinfer", 2)].crash.bundle)
    b.tensors["req_to_token.rows"][0, 0] = 7
    out = replay_crash(b, fix=True)
    assert out.metadata["kv_indices"] == out.reference["kv_indices"] == [7]


def test_dp1_forward_failure_writes_a_verify_bundle(monkeypatch):
    """dp 1 in the calling process: a forward that raises (here a patched backend on TARGET_VERIFY)."""
    from workbench.backends.torch_native import TorchNativeBackend

    real = TorchNativeBackend.init_forward_metadata

    def failing(self, forward_batch):
        if forward_batch.forward_mode.is_target_verify():
            raise ValueError(f"test: verify batch of {forward_batch.batch_size}")
        return real(self, forward_batch)

    monkeypatch.setattr(TorchNativeBackend, "init_forward_metadata", failing)
    res = workbench.reproduce(backend="torch_native", revision="pr-28221", dp=1, **{**SMALL, "dp_policy": "balanced"})
    assert res.status == "crashed" and res.crash.bundle, res.summary()
    b = load_bundle(res.crash.bundle)
    assert (b.meta["forward_mode"], b.meta["spec_info"]["class"]) == ("TARGET_VERIFY", "EagleVerifyInput")
    assert b.fb("extend_seq_lens") is not None and b.tensors["spec_info.custom_mask"].dtype == torch.bool
    read = int(b.fb("seq_lens").max()) + 4  # prefix + the tree's draft tokens: only what the metadata reads
    assert list(b.tensors["req_to_token.rows"].shape) == [1, read] and read < b.meta["req_to_token_shape"][1]
    with pytest.raises(ValueError, match="test: verify batch of 1"):
        res.replay_crash()
    shutil.rmtree(Path(res.crash.bundle).parent)


def test_cli_replays_and_writes_json(crashes, tmp_path, capsys):
    bundle = crashes[("triton", 3)].crash.bundle
    assert workbench_main(["debug", bundle]) == 0
    assert "same exception and innermost frame as recorded" in capsys.readouterr().out
    assert workbench_main(["debug", bundle, "--fix", "pr-28221", "--json", str(tmp_path / "o.json")]) == 0
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["result"]["matches_reference"] is True and out["result"]["metadata"]["kv_indptr"] == [0, 1]


def _copy(crashes, tmp_path) -> Path:
    return Path(shutil.copytree(crashes[("triton", 2)].crash.bundle, tmp_path / "crash-bundle-rank1"))


def _edit_json(d: Path, edit) -> None:
    meta = json.loads((d / "bundle.json").read_text())
    edit(meta)
    (d / "bundle.json").write_text(json.dumps(meta))


def test_bad_bundles_are_refused_naming_file_and_fault(crashes, tmp_path):
    missing = _copy(crashes, tmp_path / "a")
    (missing / "tensors.safetensors").unlink()
    with pytest.raises(BundleError, match=re.escape(str(missing / "tensors.safetensors")) + ": missing"):
        load_bundle(missing)
    with pytest.raises(BundleError, match="no such bundle directory"):
        load_bundle(tmp_path / "nowhere")

    shape = _copy(crashes, tmp_path / "b")
    _edit_json(shape, lambda m: m["tensors"]["forward_batch.seq_lens"].update(shape=[2]))
    with pytest.raises(
        BundleError,
        match=r"tensors\.safetensors: tensor 'forward_batch\.seq_lens' is int64 \[1\], "
        r"bundle\.json says int64 \[2\]",
    ):
        load_bundle(shape)

    both = _copy(crashes, tmp_path / "c")  # tensors and JSON changed together: the batch no longer adds up
    t = load_file(str(both / "tensors.safetensors"))
    t["forward_batch.seq_lens"] = torch.tensor([1, 1])
    save_file(t, str(both / "tensors.safetensors"))
    _edit_json(both, lambda m: m["tensors"]["forward_batch.seq_lens"].update(shape=[2]))
    with pytest.raises(BundleError, match=r"bundle\.json: forward_batch\.seq_lens has shape \[2\], batch_size is 1"):
        load_bundle(both)

    cls = _copy(crashes, tmp_path / "d")
    _edit_json(cls, lambda m: m["spec_info"].update(module="os", **{"class": "system"}))
    with pytest.raises(
        BundleError, match=r"bundle\.json: spec_info class os\.system is not an allowed spec-input class"
    ):
        load_bundle(cls)

    newer = _copy(crashes, tmp_path / "e")
    _edit_json(newer, lambda m: m.update(format_version=2))
    with pytest.raises(BundleError, match=r"bundle\.json: format_version 2 is newer than this workbench reads \(1\)"):
        load_bundle(newer)
    assert workbench_main(["debug", str(newer)]) == 2


def test_progress_sees_rank_events_and_the_run_renders_as_html(crashes, events):
    assert ("done", 1) in {(k, r) for k, r, _ in events} and any(k == "forward" and r == 2 for k, r, _ in events)
    res = crashes[("triton", 2)]
    page = res._repr_html_()
    assert ">crashed</span>" in page and "<table>" in page and "triton (interpreter, CPU)" in page
    assert "<details><summary>traceback" in page and "kv_indptr" in page and res.crash.bundle in page
    assert repr(res).startswith("RunResult: [crashed]")


def test_text_diff_and_class_fields():
    same = text_diff({"outputs": [[104, 105]]}, {"outputs": [[104, 105]]}, ("x", "y"))
    other = text_diff({"outputs": [[104, 105]]}, {"outputs": [[104, 106]]}, ("x", "y"))
    assert "prompt 0: identical" in repr(same) and "prompt 0: DIFFERENT" in repr(other)
    assert "<table" in other._repr_html_() and "'hi'" in repr(other) and "'hj'" in repr(other)
    from workbench.speculative.eagle_draft_extend_pr24860 import EagleDraftExtendInput

    before = [r["field"] for r in class_fields(EagleDraftExtendInput).rows]
    workbench.apply_fix()
    try:
        after = class_fields(EagleDraftExtendInput).rows
    finally:
        workbench.undo_fix()
    assert "kv_indptr" not in before and after[-1] == {
        "field": "kv_indptr",
        "type": "torch.Tensor | None",
        "default": "None",
    }


def test_spec_tensors_over_1_mib_are_stored_as_shape_only():
    from workbench.debug.bundle import _field_entry

    kept: dict = {}
    assert _field_entry("hidden_states", torch.zeros(512, 1024), kept) == {
        "kind": "tensor_omitted",
        "shape": [512, 1024],
        "dtype": "float32",
    }
    assert kept == {}
