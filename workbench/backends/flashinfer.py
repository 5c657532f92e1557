"""flashinfer: the flashinfer backend's metadata contract (indices updater: ``kv_indptr``,
``kv_indices``, ``kv_last_page_len``; decode/idle reads ``spec_info.kv_indptr``).

The attention itself is computed by ``padded_attention``, a torch stand-in for flashinfer's
kernels (GPU-only, not called by the workbench); the kernel label names it so everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.backends.base import AttentionBackend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.backends.paged_ref import PaddedLayout, StandInBackend, build_layout, split_custom_mask
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.ops import indptr_from_lens


@dataclass
class FlashInferMetadata:
    qo_indptr: torch.Tensor  # (bs+1,) int64
    kv_indptr: torch.Tensor  # (bs+1,) int64, new tokens included
    kv_indices: torch.Tensor  # (nnz,) int64
    kv_last_page_len: torch.Tensor  # (bs,) int32, always 1 (page size 1)
    layout: PaddedLayout  # the stand-in's padded view of the above (built once per batch)


class FlashInferBackend(StandInBackend, AttentionBackend):
    name = "flashinfer"
    library = "flashinfer"
    reads_spec_kv_indptr = True

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        fb = forward_batch
        bs = fb.batch_size
        table = fb.req_to_token_pool.req_to_token
        spec_info = fb.spec_info
        if fb.forward_mode.is_decode_or_idle():
            # indices updater (decode): multi-step draft decode hands over its own indices
            if spec_info is None or spec_info.kv_indptr is None:
                kv_indptr, kv_indices = seq_lens_kv_metadata(
                    table, fb.req_pool_indices, fb.seq_lens, self.ops.build_kv_indices
                )
            else:
                kv_indptr, kv_indices = spec_info.kv_indptr, spec_info.kv_indices
            qo_indptr = torch.arange(bs + 1, dtype=torch.int64)
            masks, causal = None, False
        else:
            # indices updater (prefill): prefix + new tokens, all in the paged cache
            q_lens = fb.extend_seq_lens
            if fb.forward_mode.is_target_verify():
                kv_lens = fb.seq_lens + spec_info.draft_token_num
            else:
                kv_lens = fb.seq_lens
            kv_indptr, kv_indices = seq_lens_kv_metadata(table, fb.req_pool_indices, kv_lens, self.ops.build_kv_indices)
            qo_indptr = indptr_from_lens(q_lens)
            masks = (
                split_custom_mask(spec_info.custom_mask, q_lens.tolist(), kv_lens.tolist())
                if fb.forward_mode.is_target_verify()
                else None
            )
            causal = masks is None
        fb.attn_metadata = FlashInferMetadata(
            qo_indptr,
            kv_indptr,
            kv_indices,
            torch.ones(bs, dtype=torch.int32),
            build_layout(qo_indptr, kv_indptr, kv_indices, causal, masks),
        )
