"""``ForwardBatch``: everything one forward pass of one model needs, metadata included.

Conventions (page size 1, all tensors on the run's device):
- DECODE / IDLE: one query token per row; ``seq_lens`` counts the KV the row attends to,
  its own new token included.
- EXTEND / DRAFT_EXTEND: ``extend_seq_lens`` new tokens per request after ``extend_prefix_lens``
  cached ones; ``seq_lens`` = prefix + new.
- TARGET_VERIFY: ``seq_lens`` = prefix only (as upstream); every request adds
  ``spec_info.draft_token_num`` tree tokens under ``spec_info.custom_mask``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.engine.hooks import NO_HOOKS, Hooks
from workbench.mem.pool import KVCache, ReqToTokenPool
from workbench_kernels.ragged import indptr_from_lens


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    input_ids: torch.Tensor  # (T,) int64
    positions: torch.Tensor  # (T,) int64
    req_pool_indices: torch.Tensor  # (bs,) int64 rows of req_to_token
    seq_lens: torch.Tensor  # (bs,) int64, see the module docstring
    out_cache_loc: torch.Tensor  # (T,) int64 slots the new K/V are written to (0 = padding sink)
    req_to_token_pool: ReqToTokenPool
    kv_cache: KVCache
    attn_backend: Any  # workbench.backends.base.AttentionBackend
    extend_seq_lens: torch.Tensor | None = None  # (bs,) int64, extend modes
    extend_prefix_lens: torch.Tensor | None = None  # (bs,) int64, extend modes
    spec_info: Any | None = None
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.NULL
    dp_comm: Any | None = None  # workbench.run.dp.comm.DPCommunicator under DP attention
    is_padded_idle: bool = False
    hooks: Hooks = field(default=NO_HOOKS, repr=False)  # the run's observers (workbench.engine.hooks)
    attn_metadata: Any | None = field(default=None, repr=False)  # set by init_forward_metadata

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def seq_lens_sum(self) -> int:
        return int(self.seq_lens.sum())

    def extend_start_loc(self) -> torch.Tensor:
        """(bs,) offset of each request's first new token in the packed token dim."""
        return indptr_from_lens(self.extend_seq_lens)[:-1]
