"""The attention-backend interface: a metadata contract plus a kernel (docs/design.md §3).

``init_forward_metadata(forward_batch)`` runs once per batch and stores the per-batch metadata
on ``forward_batch.attn_metadata``; every layer's ``forward`` then reads it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.ops import TORCH_OPS, BookkeepingOps
from workbench.mem.pool import KVCache, ReqToTokenPool

if TYPE_CHECKING:
    from workbench.backends.multi_step import DraftDecodePlan


@dataclass(frozen=True)
class BackendContext:
    """What a backend needs from its model runner."""

    req_to_token_pool: ReqToTokenPool
    kv_cache: KVCache
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @property
    def scaling(self) -> float:
        return self.head_dim**-0.5


class AttentionBackend(ABC):
    name: str = ""
    reads_spec_kv_indptr: bool = False  # part of the contract: does decode/idle read spec_info.kv_indptr?
    ops: BookkeepingOps = TORCH_OPS  # the bookkeeping ops the workers use on this backend's runs

    def __init__(self, ctx: BackendContext) -> None:
        self.ctx = ctx

    @property
    def kernel(self) -> str:
        """What computes attention, named honestly (stand-ins say so)."""
        return self.name

    @property
    def kernel_is_stand_in(self) -> bool:
        return False

    @abstractmethod
    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        """Build this batch's metadata and store it on ``forward_batch.attn_metadata``."""

    def init_draft_decode_metadata(self, forward_batch: ForwardBatch, plan: DraftDecodePlan, step: int) -> None:
        """A multi-step draft's DECODE step ``step`` over ``plan``'s branch rows (see
        ``backends.multi_step``): by default the plain ``init_forward_metadata``."""
        self.init_forward_metadata(forward_batch)

    @abstractmethod
    def forward_decode(self, q: torch.Tensor, layer_id: int, forward_batch: ForwardBatch) -> torch.Tensor:
        """q: (bs, Hq, D) -> (bs, Hq, D); K/V of the new tokens are already in the cache."""

    @abstractmethod
    def forward_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        """q: (T, Hq, D), k/v: (T, Hkv, D) new tokens (also already cached) -> (T, Hq, D)."""

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        """Write the new K/V at ``out_cache_loc``, then dispatch on the forward mode; the run's
        observers get the layer's time (``on_attention``) when one takes it."""
        hooks = forward_batch.hooks
        t0 = hooks.clock() if hooks.times_attention else 0.0
        forward_batch.kv_cache.set_kv(layer_id, forward_batch.out_cache_loc, k, v)
        if forward_batch.forward_mode.is_decode_or_idle():
            out = self.forward_decode(q, layer_id, forward_batch)
        else:
            out = self.forward_extend(q, k, v, layer_id, forward_batch)
        if hooks.times_attention:
            hooks.on_attention(layer_id, forward_batch, hooks.clock() - t0)
        return out
