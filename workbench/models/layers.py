"""Building blocks shared by the target and the EAGLE3 head: RMSNorm, RoPE, GQA attention, SwiGLU.

Attention has two paths: with a ``ForwardBatch`` it goes through the batch's attention backend
(paged KV cache, per-batch metadata); without one it is plain causal SDPA over ``(B, L)``
sequences, which is what training uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Rotary(nn.Module):
    """Neox-style rotary embedding with a precomputed cos/sin table."""

    def __init__(self, head_dim: int, max_position: int, theta: float) -> None:
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv)
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (..., T, heads, D) with positions broadcastable to (..., T)."""
        cos = self.cos[positions].unsqueeze(-2)
        sin = self.sin[positions].unsqueeze(-2)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    """GQA self-attention. ``in_dim`` may differ from the model width (EAGLE3 feeds 2H)."""

    def __init__(self, in_dim: int, cfg, layer_id: int) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.num_heads = cfg.num_heads
        self.num_kv_heads = cfg.num_kv_heads
        self.head_dim = cfg.head_dim
        self.scaling = cfg.head_dim**-0.5
        self.q_proj = nn.Linear(in_dim, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.rotary = Rotary(cfg.head_dim, cfg.max_position, cfg.rope_theta)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x: (..., T, in_dim) -> q (..., T, Hq, D), k and v (..., T, Hkv, D), RoPE applied."""
        shape = x.shape[:-1]
        q = self.q_proj(x).view(*shape, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(*shape, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(*shape, self.num_kv_heads, self.head_dim)
        return self.rotary(q, positions), self.rotary(k, positions), v

    def forward(self, x: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch | None) -> torch.Tensor:
        q, k, v = self.qkv(x, positions)
        if forward_batch is None:
            # training path: x is (B, L, in_dim), causal over each row
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
            ).transpose(1, 2)
        else:
            o = forward_batch.attn_backend.forward(q, k, v, self.layer_id, forward_batch)
        return self.o_proj(o.reshape(*x.shape[:-1], self.num_heads * self.head_dim))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(dim, 2 * hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)
        self.intermediate_size = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def run_mlp(mlp: SwiGLU, x: torch.Tensor, forward_batch: ForwardBatch | None) -> torch.Tensor:
    """The MLP on this rank's tokens, or, under DP attention, on all ranks' tokens (sharded)."""
    if forward_batch is not None and forward_batch.dp_comm is not None:
        return forward_batch.dp_comm.mlp(mlp, x)
    return mlp(x)
