"""fa3: flash-attention's metadata contract (``page_table`` from ``req_to_token``,
``cache_seqlens``, ``cu_seqlens_q`` / ``cu_seqlens_k``); it never reads ``kv_indptr``, which is
why the CUDA lane stayed green.

The attention itself is computed by ``padded_attention`` over the page table, a torch stand-in
for flash-attention's kernels (GPU-only, not called by the workbench); the label says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.backends.base import AttentionBackend
from workbench.backends.paged_ref import PaddedLayout, StandInBackend, build_layout, split_custom_mask
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.ops import indptr_from_lens


@dataclass
class FA3Metadata:
    cache_seqlens: torch.Tensor  # (bs,) int32 keys per request, new tokens included
    cu_seqlens_q: torch.Tensor  # (bs+1,) int32
    cu_seqlens_k: torch.Tensor  # (bs+1,) int32
    max_seq_len_k: int
    page_table: torch.Tensor  # (bs, max_seq_len_k) int32 slots, page size 1
    layout: PaddedLayout  # the stand-in's padded view of the above (built once per batch)


class FlashAttention3Backend(StandInBackend, AttentionBackend):
    name = "fa3"
    library = "flash-attention 3"
    reads_spec_kv_indptr = False

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        fb = forward_batch
        bs = fb.batch_size
        if fb.forward_mode.is_decode_or_idle():
            cache_seqlens, q_lens = fb.seq_lens, torch.ones(bs, dtype=torch.int64)
        elif fb.forward_mode.is_target_verify():
            q_lens = fb.extend_seq_lens
            cache_seqlens = fb.seq_lens + fb.spec_info.draft_token_num
        else:
            cache_seqlens, q_lens = fb.seq_lens, fb.extend_seq_lens
        max_k = int(cache_seqlens.max()) if bs else 0
        cu_q, cu_k = indptr_from_lens(q_lens, torch.int32), indptr_from_lens(cache_seqlens, torch.int32)
        masks = (
            split_custom_mask(fb.spec_info.custom_mask, q_lens.tolist(), cache_seqlens.tolist())
            if fb.forward_mode.is_target_verify()
            else None
        )
        page_table = fb.req_to_token_pool.req_to_token[fb.req_pool_indices, :max_k]
        valid = torch.arange(max_k).unsqueeze(0) < cache_seqlens.unsqueeze(1)
        causal = not fb.forward_mode.is_decode_or_idle() and masks is None
        layout = build_layout(cu_q.long(), cu_k.long(), page_table[valid].long(), causal, masks)
        fb.attn_metadata = FA3Metadata(cache_seqlens.to(torch.int32), cu_q, cu_k, max_k, page_table, layout)
