"""A real-runtime rank's crash bundle without a release: the writer (``rank_bundle.py``) run on a
stand-in sglang package (named as one: a few classes with SGLang's module paths and names, written to
a temp folder and imported in a subprocess), and the loader (``workbench.debug.sglang_bundle``)
refusing what the engine's bundles refuse (oversized shapes and pools, a foreign class, a newer
format, a tampered tensor) with the field named. The real release's bundles and their replays in
its kernel: tests/upstream/runtime/test_runtime_bundle_network.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from upstream_fixtures import in_release

from workbench.debug.bundle import BundleError
from workbench.debug.sglang_bundle import load_rank_bundle
from workbench.upstream.runtime import release_record as record_mod
from workbench.upstream.runtime.rank_result import read_rank_result

STANDIN = {  # the stand-in sglang: only what the writer and fixes.py touch
    "sglang/__init__.py": "STANDIN = 'eagle-workbench test stand-in, not SGLang'\n",
    "sglang/srt/__init__.py": "",
    "sglang/srt/speculative/__init__.py": "",
    "sglang/srt/speculative/eagle_info.py": """
        import dataclasses
        from typing import Optional
        import torch

        @dataclasses.dataclass
        class EagleVerifyInput:
            draft_token: torch.Tensor
            draft_token_num: int
            seq_lens_sum: int
    """,
    "sglang/srt/model_executor/__init__.py": "",
    "sglang/srt/model_executor/forward_batch_info.py": """
        import dataclasses, enum
        from typing import Optional
        import torch

        class ForwardMode(enum.IntEnum):
            IDLE = 1
            def is_decode_or_idle(self):
                return True

        @dataclasses.dataclass
        class ForwardBatch:
            forward_mode: ForwardMode
            batch_size: int
            input_ids: torch.Tensor
            req_pool_indices: torch.Tensor
            seq_lens: torch.Tensor
            out_cache_loc: torch.Tensor
            seq_lens_sum: int
            spec_info: Optional[object] = None
            sampling_info: Optional[object] = None
    """,
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/attention/__init__.py": "",
    "sglang/srt/layers/attention/triton_backend.py": """
        import dataclasses
        import torch

        @dataclasses.dataclass
        class ForwardMetadata:
            kv_indptr: torch.Tensor
            kv_indices: torch.Tensor
            attn_logits: torch.Tensor

        class TritonAttnBackend:
            def __init__(self, runner):
                self.req_to_token_pool = runner.req_to_token_pool
                self.token_to_kv_pool = runner.token_to_kv_pool
                self.num_head, self.max_kv_splits, self.skip_prefill = 4, 8, False
                self.forward_metadata = None

            def init_forward_metadata(self, forward_batch):
                spec_info = forward_batch.spec_info
                if spec_info is None or spec_info.kv_indptr is None:
                    lens = forward_batch.seq_lens
                    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), lens.cumsum(0).to(torch.int32)])
                    rows = self.req_to_token_pool.req_to_token[forward_batch.req_pool_indices]
                    indices = torch.cat([r[: int(n)] for r, n in zip(rows, lens)]).to(torch.int64)
                    self.forward_metadata = ForwardMetadata(indptr, indices, torch.empty(len(lens), 4))
    """,
}
WRITE = """
import sys, types, torch
{boot}from wb_upstream.runtime import rank_bundle
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleVerifyInput
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

class MHATokenToKVPool:  # the pool's facts the writer reads
    size, page_size, head_num, head_dim, v_head_dim, layer_num, start_layer, dtype = 64, 1, 2, 8, 8, 2, 0, torch.float32
MHATokenToKVPool.__module__ = "sglang.srt.mem_cache.memory_pool"
table = torch.zeros((3, 16), dtype=torch.int32)
table[0, :1] = torch.tensor([7], dtype=torch.int32)
runner = types.SimpleNamespace(
    req_to_token_pool=types.SimpleNamespace(req_to_token=table, size=2), token_to_kv_pool=MHATokenToKVPool()
)
backend = TritonAttnBackend(runner)
spec = EagleVerifyInput(torch.zeros(0, dtype=torch.int64), 4, 0)
fb = ForwardBatch(ForwardMode.IDLE, 1, torch.zeros(4, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
                  torch.ones(1, dtype=torch.int64), torch.zeros(4, dtype=torch.int64), 1, spec, object())

def execute(model_runner, forward_batch):
    backend.init_forward_metadata(forward_batch)

cfg = {{"rank": 1, "dp": 2, "version": "standin", "src_root": {standin!r}, "server_args": {{"dtype": "float32"}}}}
try:
    execute(runner, fb)
except AttributeError as exc:
    print(rank_bundle.write({out!r}, cfg, exc, {{"shims": ["cuda-synchronize"], "fixes": []}}))
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle the writer made of the stand-in's verify-pass crash (idle rank, kv_indptr missing)."""
    root = tmp_path_factory.mktemp("standin")
    for rel, text in STANDIN.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    out = tmp_path_factory.mktemp("bundles")
    script = WRITE.format(boot=in_release(str(root)), standin=str(root), out=str(out))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


def test_the_writer_records_batch_spec_input_backend_pools_and_the_fixed_metadata(bundle: Path) -> None:
    b = load_rank_bundle(bundle)
    m = b.meta
    assert bundle.name == "crash-bundle-rank1" and (m["rank"], m["dp"], m["forward_mode"]) == (1, 2, "IDLE")
    assert m["spec_info"]["class"] == "EagleVerifyInput" and m["spec_info"]["missing"] == ["kv_indptr"]
    assert set(m["spec_info"]["attributes"]) == {"draft_token", "draft_token_num", "seq_lens_sum"}
    assert (m["backend"]["class"], m["backend"]["method"]) == ("TritonAttnBackend", "init_forward_metadata")
    assert m["backend"]["attributes"]["num_head"] == 4
    assert m["forward_batch"]["sampling_info"] == {"kind": "object", "type": "builtins.object"}
    assert m["pools"]["req_to_token"] == {"shape": [3, 16], "size": 2} and m["pools"]["token_to_kv"]["size"] == 64
    assert b.tensors["req_to_token.rows"].tolist() == [[7, 0, 0, 0, 0]]  # max seq_len 1 + draft_token_num 4
    assert m["raised_at"]["relative"] == os.path.join("sglang", "srt", "layers", "attention", "triton_backend.py")
    assert m["raised_at"]["code"] == "if spec_info is None or spec_info.kv_indptr is None:"
    assert m["exception"]["name"] == "kv_indptr" and "Traceback" in m["traceback"]
    assert m["code_state"]["shims"] == ["cuda-synchronize"] and "TRITON_INTERPRET" in m["code_state"]["settings"]
    # the run's own method, re-run with fixes.py's verify-input on the stand-in class: the seq_lens fallback
    assert m["fixed"]["fix"] == "verify-input"
    assert b.value(m["fixed"]["metadata"]["kv_indptr"]).tolist() == [0, 1]
    assert b.value(m["fixed"]["metadata"]["kv_indices"]).tolist() == [7]
    assert m["fixed"]["metadata"]["attn_logits"] == {"kind": "tensor_omitted", "shape": [1, 4], "dtype": "float32"}


def _edited(src: Path, tmp_path: Path, edit) -> Path:
    d = Path(shutil.copytree(src, tmp_path / "b" / src.name))
    meta = json.loads((d / "bundle.json").read_text())
    edit(meta)
    (d / "bundle.json").write_text(json.dumps(meta))
    return d


ATTACKS = {
    "newer format": (lambda m: m.update(format_version=2), "format_version 2 is newer than this workbench reads"),
    "foreign spec class": (
        lambda m: m["spec_info"].update(module="os", **{"class": "system"}),
        "spec_info class os.system is not allowed",
    ),
    "foreign backend class": (
        lambda m: m["backend"].update(module="subprocess", **{"class": "Popen"}),
        "backend class subprocess.Popen is not allowed",
    ),
    "foreign method": (lambda m: m["backend"].update(method="__init__"), "backend.method '__init__'"),
    "oversized request table": (
        lambda m: m["pools"]["req_to_token"].update(shape=[3, 1 << 40]),
        "pools.req_to_token.shape columns 1099511627776 exceeds the limit",
    ),
    "oversized KV pool": (
        lambda m: m["pools"]["token_to_kv"].update(size=(1 << 31) - 1),
        "replay allocation (request table + KV pool) bytes",
    ),
    "oversized tensor shape": (
        lambda m: m["tensors"]["forward_batch.seq_lens"].update(shape=[1 << 20, 1 << 20]),
        "tensor 'forward_batch.seq_lens' elements 1099511627776 exceeds the limit",
    ),
    "oversized omitted tensor": (
        lambda m: m["fixed"]["metadata"]["attn_logits"].update(shape=[1 << 30, 1 << 30]),
        "fixed.metadata.attn_logits dimension 1073741824 exceeds the limit",
    ),
    "foreign enum": (
        lambda m: m["spec_info"]["attributes"].update(x={"kind": "enum", "type": "Popen", "value": "A"}),
        "spec_info.attributes.x enum 'Popen'",
    ),
    "unknown kind": (
        lambda m: m["forward_batch"].update(x={"kind": "pickle"}),
        "forward_batch.x has kind 'pickle'",
    ),
    "rank beyond dp": (lambda m: m.update(rank=2), "rank 2 exceeds the limit 1 (dp 2)"),
}


@pytest.mark.parametrize("case", sorted(ATTACKS))
def test_bundle_attacks_are_refused_with_the_field_named(bundle: Path, tmp_path: Path, case: str) -> None:
    edit, message = ATTACKS[case]
    with pytest.raises(BundleError) as err:
        load_rank_bundle(_edited(bundle, tmp_path, edit))
    assert message in str(err.value) and "bundle.json" in str(err.value)


def test_a_tampered_tensor_or_a_slot_outside_the_pool_is_refused(bundle: Path, tmp_path: Path) -> None:
    d = _edited(bundle, tmp_path, lambda m: None)
    tensors = load_file(str(d / "tensors.safetensors"))
    tensors["forward_batch.seq_lens"] = torch.ones(3, dtype=torch.int64)
    save_file(tensors, str(d / "tensors.safetensors"))
    with pytest.raises(BundleError, match=r"tensor 'forward_batch.seq_lens' is int64 \[3\], bundle.json says"):
        load_rank_bundle(d)
    tensors["forward_batch.seq_lens"] = torch.ones(1, dtype=torch.int64)
    tensors["req_to_token.rows"] = torch.tensor([[1 << 20, 0, 0, 0, 0]], dtype=torch.int32)
    save_file(tensors, str(d / "tensors.safetensors"))
    with pytest.raises(BundleError, match=r"req_to_token.rows slot 0..1048576 outside the KV pool's slots 0..64"):
        load_rank_bundle(d)


def test_the_record_names_the_ranks_bundle() -> None:
    res = {"status": "crashed", "rank": 1, "exception": "AttributeError", "message": "m", "traceback": "t"}
    named = read_rank_result({**res, "bundle": "/out/crash-bundle-rank1"}, 1)
    assert record_mod._crash(named).bundle == "/out/crash-bundle-rank1"
    crash = record_mod._crash(read_rank_result({**res, "bundle_error": "OSError: disk full"}, 1))
    assert crash.bundle is None and crash.bundle_error == "OSError: disk full"


def test_kernel_remove_refuses_a_kernelspec_it_did_not_write(tmp_path: Path, monkeypatch) -> None:
    from workbench.cli import main

    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))
    assert main(["upstream", "kernel", "--sglang", "0.5.14", "--remove"]) == 2  # none registered
    foreign = tmp_path / "kernels" / "sglang-0.5.14"
    foreign.mkdir(parents=True)
    (foreign / "kernel.json").write_text(json.dumps({"argv": ["python"], "metadata": {}}))
    assert main(["upstream", "kernel", "--sglang", "0.5.14", "--remove"]) == 2
    assert foreign.is_dir()
    (foreign / "kernel.json").write_text(json.dumps({"argv": ["python"], "metadata": {"workbench": {}}}))
    assert main(["upstream", "kernel", "--sglang", "0.5.14", "--remove"]) == 0
    assert not foreign.exists()
