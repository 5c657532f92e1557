"""Collectives DP attention needs: token-count all-gather per forward, "any rank" flags, and
the MLP on every rank's tokens, sharded over the intermediate dimension across ranks. Each
collective reports its time to the run's observers (``hooks.on_collective``) when one takes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from workbench.engine.hooks import NO_HOOKS, Hooks
from workbench.models.layers import SwiGLU

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch


class DPCommunicator:
    def __init__(self, rank: int, world_size: int, hooks: Hooks = NO_HOOKS) -> None:
        self.rank = rank
        self.world_size = world_size
        self.hooks = hooks  # the run's observers; the runner hands them over with the worker's
        self.counts: list[int] = []
        self._shards: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def any_rank(self, flag: bool) -> bool:
        t0 = self.hooks.clock() if self.hooks.times_collectives else 0.0
        t = torch.tensor([int(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out = bool(t.item())
        if self.hooks.times_collectives:
            self.hooks.on_collective("any_rank", self.hooks.clock() - t0)
        return out

    def begin_forward(self, fb: ForwardBatch) -> None:
        """All-gather every rank's token count for this forward (the DP sync of SGLang)."""
        t0 = self.hooks.clock() if self.hooks.times_collectives else 0.0
        out = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        dist.all_gather(out, torch.tensor([fb.num_tokens], dtype=torch.int64))
        self.counts = [int(c) for c in out]
        if self.hooks.times_collectives:
            self.hooks.on_collective("begin_forward", self.hooks.clock() - t0)

    def _shard(self, mlp: SwiGLU):
        key = id(mlp)
        if key not in self._shards:
            inter = mlp.intermediate_size
            per = -(-inter // self.world_size)
            lo, hi = self.rank * per, min(inter, (self.rank + 1) * per)
            w = mlp.gate_up_proj.weight
            self._shards[key] = (w[lo:hi], w[inter + lo : inter + hi], mlp.down_proj.weight[:, lo:hi])
        return self._shards[key]

    def mlp(self, mlp: SwiGLU, x: torch.Tensor) -> torch.Tensor:
        """x: (T_local, H) -> (T_local, H). Gathers all ranks' tokens, runs this rank's slice of
        the intermediate dimension, all-reduces the partial sums and keeps its own rows."""
        t0 = self.hooks.clock() if self.hooks.times_collectives else 0.0
        width = max(self.counts) if self.counts else x.shape[0]
        padded = F.pad(x, (0, 0, 0, width - x.shape[0]))
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        dist.all_gather(parts, padded.contiguous())
        x_all = torch.cat([p[:c] for p, c in zip(parts, self.counts, strict=False)])
        wg, wu, wd = self._shard(mlp)
        y = F.linear(F.silu(F.linear(x_all, wg)) * F.linear(x_all, wu), wd)
        dist.all_reduce(y)
        start = sum(self.counts[: self.rank])
        if self.hooks.times_collectives:
            self.hooks.on_collective("mlp", self.hooks.clock() - t0)
        return y[start : start + x.shape[0]]
