"""torch_native: gathers each request's K/V from ``req_to_token`` and calls SDPA per request.

Contract: reads ``seq_lens``, ``req_pool_indices``, extend lengths and, for target-verify,
``spec_info.custom_mask``; never ``spec_info.kv_indptr``. Slow, simple: the oracle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn.functional as F

from workbench.backends.base import AttentionBackend
from workbench.engine.forward_batch import ForwardBatch


@dataclass
class TorchNativeMetadata:
    rows: List[int]  # req_to_token row per request
    kv_lens: List[int]  # keys each request's last query sees (prefix + new)
    q_starts: List[int]  # offset of each request's queries in the packed token dim
    q_lens: List[int]
    masks: List[Optional[torch.Tensor]]  # per request (q_len, kv_len) bool, None = causal/decode


class TorchNativeBackend(AttentionBackend):
    name = "torch_native"
    reads_spec_kv_indptr = False

    @property
    def kernel(self) -> str:
        return "torch SDPA per request"

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        fb = forward_batch
        rows = fb.req_pool_indices.tolist()
        if fb.forward_mode.is_decode_or_idle():
            kv = fb.seq_lens.tolist()
            fb.attn_metadata = TorchNativeMetadata(rows, kv, list(range(len(rows))), [1] * len(rows), [None] * len(rows))
            return
        if fb.forward_mode.is_target_verify():
            n = fb.spec_info.draft_token_num
            prefix = fb.seq_lens.tolist()
            q_lens = [n] * len(rows)
            masks, off = [], 0
            for p in prefix:
                size = n * (p + n)
                masks.append(fb.spec_info.custom_mask[off : off + size].view(n, p + n))
                off += size
            kv = [p + n for p in prefix]
        else:
            q_lens = fb.extend_seq_lens.tolist()
            kv = fb.seq_lens.tolist()
            masks = [None] * len(rows)
        starts = [0] * len(rows)
        for i in range(1, len(rows)):
            starts[i] = starts[i - 1] + q_lens[i - 1]
        fb.attn_metadata = TorchNativeMetadata(rows, kv, starts, q_lens, masks)

    def _attend(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch, causal: bool) -> torch.Tensor:
        md: TorchNativeMetadata = fb.attn_metadata
        k_cache, v_cache = fb.kv_cache.get_kv(layer_id)
        table = fb.req_to_token_pool.req_to_token
        out = torch.empty_like(q)
        for row, kv_len, s, n, mask in zip(md.rows, md.kv_lens, md.q_starts, md.q_lens, md.masks):
            slots = table[row, :kv_len].long()
            k = k_cache[slots].transpose(0, 1)
            v = v_cache[slots].transpose(0, 1)
            if mask is None and causal and n > 1:
                mask = torch.ones(n, kv_len, dtype=torch.bool).tril(kv_len - n)
            o = F.scaled_dot_product_attention(
                q[s : s + n].transpose(0, 1), k, v, attn_mask=mask, scale=self.ctx.scaling, enable_gqa=True
            )
            out[s : s + n] = o.transpose(0, 1)
        return out

    def forward_decode(self, q: torch.Tensor, layer_id: int, forward_batch: ForwardBatch) -> torch.Tensor:
        return self._attend(q, layer_id, forward_batch, causal=False)

    def forward_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        return self._attend(q, layer_id, forward_batch, causal=True)
