"""torch_native: gathers each request's K/V from ``req_to_token`` and runs SDPA over the batch
(padded per request, masked), as upstream's torch_native backend does request by request.

Contract: reads ``seq_lens``, ``req_pool_indices``, extend lengths and, for target-verify,
``spec_info.custom_mask``; never ``spec_info.kv_indptr``.
"""

from __future__ import annotations

import torch

from workbench.backends.base import AttentionBackend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.backends.multi_step import DraftDecodePlan
from workbench.backends.paged_ref import PaddedLayout, build_layout, padded_attention, split_custom_mask
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.ops import indptr_from_lens


class TorchNativeBackend(AttentionBackend):
    name = "torch_native"
    reads_spec_kv_indptr = False

    @property
    def kernel(self) -> str:
        return "torch SDPA (batched, padded per request)"

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        fb = forward_batch
        bs = fb.batch_size
        masks = None
        if fb.forward_mode.is_decode_or_idle():
            q_lens, kv_lens = torch.ones(bs, dtype=torch.int64), fb.seq_lens
        elif fb.forward_mode.is_target_verify():
            n = fb.spec_info.draft_token_num
            q_lens, kv_lens = torch.full((bs,), n, dtype=torch.int64), fb.seq_lens + n
            masks = split_custom_mask(fb.spec_info.custom_mask, q_lens.tolist(), kv_lens.tolist())
        else:
            q_lens, kv_lens = fb.extend_seq_lens, fb.seq_lens
        kv_indptr, slots = seq_lens_kv_metadata(
            fb.req_to_token_pool.req_to_token, fb.req_pool_indices, kv_lens, self.ops.build_kv_indices
        )
        causal = not fb.forward_mode.is_decode_or_idle() and masks is None
        fb.attn_metadata = build_layout(indptr_from_lens(q_lens), kv_indptr, slots, causal, masks)

    def init_draft_decode_metadata(self, forward_batch: ForwardBatch, plan: DraftDecodePlan, step: int) -> None:
        """The padded layout straight from the branch rows and the plan's mask: what
        ``init_forward_metadata`` builds for this batch, without rebuilding it every step."""
        width = plan.max_prefix + step
        rows = plan.rows.shape[0]
        slots = forward_batch.req_to_token_pool.req_to_token[plan.rows, :width].long()
        mask = plan.valid[step - 1, :, :width].view(rows, 1, 1, width)
        forward_batch.attn_metadata = PaddedLayout(slots, plan.q_index, plan.q_valid, mask)

    def _attend(self, q: torch.Tensor, layer_id: int, fb: ForwardBatch) -> torch.Tensor:
        k_cache, v_cache = fb.kv_cache.get_kv(layer_id)
        return padded_attention(q, k_cache, v_cache, fb.attn_metadata, self.ctx.scaling)

    def forward_decode(self, q: torch.Tensor, layer_id: int, forward_batch: ForwardBatch) -> torch.Tensor:
        return self._attend(q, layer_id, forward_batch)

    def forward_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        return self._attend(q, layer_id, forward_batch)
