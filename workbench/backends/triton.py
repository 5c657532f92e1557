"""triton: SGLang's triton backend contract with our Triton kernels (``kernels/``).

Decode/idle takes ``kv_indptr`` / ``kv_indices`` from the spec_info when one is given and its
``kv_indptr`` is not None (multi-step draft decode), else the seq_lens fallback. The attribute
read is the upstream one, so an ``EagleDraftExtendInput`` without the field (revision
``pr-24860``) raises AttributeError on a DP-padded idle draft-extend batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import workbench_kernels
from workbench.backends.base import AttentionBackend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.ops import TRITON_OPS, indptr_from_lens

MAX_KV_SPLITS = 8


@dataclass
class TritonMetadata:
    kv_indptr: torch.Tensor  # (bs+1,) int64; decode: all keys, extend modes: prefix only
    kv_indices: torch.Tensor  # (nnz,) int64
    qo_indptr: torch.Tensor | None = None  # (bs+1,) int64, extend modes
    max_extend_len: int = 0
    custom_mask: torch.Tensor | None = None  # flat bool, target-verify
    mask_indptr: torch.Tensor | None = None  # (bs+1,) int64, target-verify
    num_kv_splits: torch.Tensor | None = None  # (bs,) int32, decode
    attn_logits: torch.Tensor | None = None  # (bs, Hq, MAX_KV_SPLITS, D) fp32 scratch, decode
    attn_lse: torch.Tensor | None = None  # (bs, Hq, MAX_KV_SPLITS) fp32 scratch, decode


class TritonBackend(AttentionBackend):
    name = "triton"
    reads_spec_kv_indptr = True
    ops = TRITON_OPS

    @property
    def kernel(self) -> str:
        return workbench_kernels.kernel_label()

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        fb = forward_batch
        bs = fb.batch_size
        table = fb.req_to_token_pool.req_to_token
        spec_info = fb.spec_info
        if fb.forward_mode.is_decode_or_idle():
            if spec_info is None or spec_info.kv_indptr is None:
                # kv_indptr is None for draft-extend's idle batch: plain metadata from seq_lens
                kv_indptr, kv_indices = seq_lens_kv_metadata(
                    table, fb.req_pool_indices, fb.seq_lens, self.ops.build_kv_indices
                )
            else:
                kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            h, d = self.ctx.num_heads, self.ctx.head_dim
            fb.attn_metadata = TritonMetadata(
                kv_indptr,
                kv_indices,
                num_kv_splits=workbench_kernels.get_num_kv_splits(kv_indptr[1:] - kv_indptr[:-1], MAX_KV_SPLITS),
                attn_logits=torch.empty(bs, h, MAX_KV_SPLITS, d, dtype=torch.float32),
                attn_lse=torch.empty(bs, h, MAX_KV_SPLITS, dtype=torch.float32),
            )
            return
        prefix = fb.seq_lens if fb.forward_mode.is_target_verify() else fb.extend_prefix_lens
        kv_indptr, kv_indices = seq_lens_kv_metadata(table, fb.req_pool_indices, prefix, self.ops.build_kv_indices)
        q_lens = fb.extend_seq_lens
        md = TritonMetadata(kv_indptr, kv_indices, indptr_from_lens(q_lens), int(q_lens.max()) if bs else 0)
        if fb.forward_mode.is_target_verify():
            n = spec_info.draft_token_num
            md.custom_mask = spec_info.custom_mask
            md.mask_indptr = indptr_from_lens(n * (prefix + n))
        fb.attn_metadata = md

    def forward_decode(self, q: torch.Tensor, layer_id: int, forward_batch: ForwardBatch) -> torch.Tensor:
        md: TritonMetadata = forward_batch.attn_metadata
        k_buf, v_buf = forward_batch.kv_cache.get_kv(layer_id)
        o = torch.empty_like(q)
        workbench_kernels.decode_attention_fwd(
            q=q.contiguous(),
            k_buffer=k_buf,
            v_buffer=v_buf,
            o=o,
            kv_indptr=md.kv_indptr,
            kv_indices=md.kv_indices,
            num_kv_splits=md.num_kv_splits,
            max_kv_splits=MAX_KV_SPLITS,
            sm_scale=self.ctx.scaling,
            attn_logits=md.attn_logits,
            attn_lse=md.attn_lse,
        )
        return o

    def forward_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        md: TritonMetadata = forward_batch.attn_metadata
        k_buf, v_buf = forward_batch.kv_cache.get_kv(layer_id)
        o = torch.empty_like(q)
        workbench_kernels.extend_attention_fwd(
            q_extend=q.contiguous(),
            k_extend=k.contiguous(),
            v_extend=v.contiguous(),
            o_extend=o,
            k_buffer=k_buf,
            v_buffer=v_buf,
            qo_indptr=md.qo_indptr,
            kv_indptr=md.kv_indptr,
            kv_indices=md.kv_indices,
            custom_mask=md.custom_mask,
            mask_indptr=md.mask_indptr,
            is_causal=md.custom_mask is None,
            max_len_extend=md.max_extend_len,
            sm_scale=self.ctx.scaling,
        )
        return o
