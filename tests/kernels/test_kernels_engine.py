"""Kernel parity on the engine's own metadata: the target-verify tree masks and the per-branch
draft-decode kv indices of a real EAGLE3 run, each call checked against the torch reference."""

from __future__ import annotations

import os

import pytest

import workbench_kernels
from workbench import reproduce
from workbench.backends.triton import TritonBackend
from workbench.engine.forward_mode import ForwardMode

MODEL_DIR = os.environ.get("WB_MODEL_DIR")


def test_triton_kernels_match_reference_on_real_drafts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {"TARGET_VERIFY": 0, "DECODE": 0, "DRAFT_EXTEND": 0, "EXTEND": 0}
    worst = 0.0
    ext, dec = TritonBackend.forward_extend, TritonBackend.forward_decode

    def checked_extend(self, q, k, v, layer_id, fb):
        nonlocal worst
        out = ext(self, q, k, v, layer_id, fb)
        md = fb.attn_metadata
        k_buf, v_buf = fb.kv_cache.get_kv(layer_id)
        ref = workbench_kernels.extend_attention_ref(
            q_extend=q,
            k_extend=k,
            v_extend=v,
            k_buffer=k_buf,
            v_buffer=v_buf,
            qo_indptr=md.qo_indptr,
            kv_indptr=md.kv_indptr,
            kv_indices=md.kv_indices,
            custom_mask=md.custom_mask,
            mask_indptr=md.mask_indptr,
            is_causal=md.custom_mask is None,
            sm_scale=self.ctx.scaling,
        )
        worst = max(worst, (out - ref).abs().max().item())
        seen[fb.forward_mode.name] += 1
        if fb.forward_mode == ForwardMode.TARGET_VERIFY:  # a real tree: some node must not see another
            assert not bool(md.custom_mask.all())
        return out

    def checked_decode(self, q, layer_id, fb):
        nonlocal worst
        out = dec(self, q, layer_id, fb)
        md = fb.attn_metadata
        k_buf, v_buf = fb.kv_cache.get_kv(layer_id)
        ref = workbench_kernels.decode_attention_ref(
            q=q,
            k_buffer=k_buf,
            v_buffer=v_buf,
            kv_indptr=md.kv_indptr,
            kv_indices=md.kv_indices,
            sm_scale=self.ctx.scaling,
        )
        worst = max(worst, (out - ref).abs().max().item())
        if fb.forward_mode == ForwardMode.DECODE:
            assert fb.spec_info is not None and fb.spec_info.kv_indptr is md.kv_indptr  # per-branch indices
            seen["DECODE"] += 1
        return out

    monkeypatch.setattr(TritonBackend, "forward_extend", checked_extend)
    monkeypatch.setattr(TritonBackend, "forward_decode", checked_decode)
    res = reproduce(
        backend="triton",
        revision="pr-28221",
        steps=3,
        topk=3,
        draft_tokens=6,
        max_new_tokens=10,
        prompts=["def parse(self, text):\n", "import sys\n\nclass "],
        model_dir=MODEL_DIR,
    )
    assert res.status == "ok", res.summary()
    assert min(seen.values()) > 0, seen
    assert worst <= 1e-5, worst
