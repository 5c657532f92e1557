"""Torch attention over paged KV, batched with padding: the compute of torch_native and of the
flashinfer / fa3 stand-ins when those libraries are not importable (every result names them so).

Each backend turns its own metadata (req_to_token rows, kv_indptr / kv_indices, page table) into
the same padded layout, built once per batch and reused by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch


@dataclass
class PaddedLayout:
    """slots (bs, L) int64 keys per request (padding -> slot 0); q_index (bs, Q) rows of the packed
    queries (padding -> 0); q_valid (bs, Q) bool; mask (bs, 1, Q, L) bool, what each query sees."""

    slots: torch.Tensor
    q_index: torch.Tensor
    q_valid: torch.Tensor
    mask: torch.Tensor


def ragged_to_padded(flat: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
    """(nnz,) split by indptr (bs+1,) -> (bs, max_len), padded with 0."""
    lens = indptr[1:] - indptr[:-1]
    bs = lens.numel()
    width = int(lens.max()) if bs else 0
    cols = torch.arange(width)
    valid = cols.unsqueeze(0) < lens.unsqueeze(1)
    idx = (indptr[:-1].unsqueeze(1) + cols).clamp(max=max(flat.numel() - 1, 0))
    return torch.where(valid, flat[idx] if flat.numel() else torch.zeros_like(idx), 0)


def build_layout(
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_slots: torch.Tensor,
    causal: bool,
    masks: list[torch.Tensor] | None = None,
) -> PaddedLayout:
    """Queries qo_indptr[i]:qo_indptr[i+1] of request i see its keys kv_slots[kv_indptr[i]:...]
    (new tokens last): all of them (decode), causally aligned to the end, or as ``masks[i]``."""
    q_lens, kv_lens = qo_indptr[1:] - qo_indptr[:-1], kv_indptr[1:] - kv_indptr[:-1]
    bs = q_lens.numel()
    qw = int(q_lens.max()) if bs else 0
    kw = int(kv_lens.max()) if bs else 0
    qpos = torch.arange(qw).unsqueeze(0)
    q_valid = qpos < q_lens.unsqueeze(1)
    q_index = torch.where(q_valid, qo_indptr[:-1].unsqueeze(1) + qpos, 0)
    kpos = torch.arange(kw).view(1, 1, kw)
    mask = (kpos < kv_lens.view(bs, 1, 1)).expand(bs, qw, kw).clone()
    if masks is not None:
        for i, m in enumerate(masks):
            mask[i, : m.shape[0], : m.shape[1]] &= m
    elif causal:  # query j of a request with n queries and m keys sees keys < m - n + j + 1
        limit = (kv_lens - q_lens).view(bs, 1, 1) + qpos.view(1, qw, 1)
        mask &= kpos <= limit
    mask &= q_valid.unsqueeze(2)
    mask[..., 0] |= ~q_valid  # padding queries see slot 0 (their output is dropped) so no row is empty
    return PaddedLayout(ragged_to_padded(kv_slots, kv_indptr), q_index, q_valid, mask.unsqueeze(1))


def padded_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, layout: PaddedLayout, scale: float
) -> torch.Tensor:
    """q: (T, Hq, D) packed queries; k/v_cache: (slots, Hkv, D) -> (T, Hq, D)."""
    out = torch.empty_like(q)
    if layout.q_index.numel() == 0:
        return out
    qp = q[layout.q_index].transpose(1, 2)  # (bs, Hq, Q, D)
    k = k_cache[layout.slots].transpose(1, 2)  # (bs, Hkv, L, D)
    v = v_cache[layout.slots].transpose(1, 2)
    o = F.scaled_dot_product_attention(qp, k, v, attn_mask=layout.mask, scale=scale, enable_gqa=True)
    out[layout.q_index[layout.q_valid]] = o.transpose(1, 2)[layout.q_valid]
    return out


def split_custom_mask(custom_mask: torch.Tensor, q_lens: list[int], kv_lens: list[int]) -> list[torch.Tensor]:
    """The flat target-verify mask as per-request (q_len, kv_len) blocks."""
    out, off = [], 0
    for n, m in zip(q_lens, kv_lens, strict=False):
        out.append(custom_mask[off : off + n * m].view(n, m))
        off += n * m
    return out


class StandInBackend:
    """Mixin for a backend that keeps a library's metadata contract but computes attention with
    ``padded_attention`` (the library itself is GPU-only and not called here); its metadata must
    carry a ``layout``. Every record and plot names the kernel a stand-in."""

    library = ""

    @property
    def kernel(self) -> str:
        return f"torch paged reference (stand-in for {self.library})"

    @property
    def kernel_is_stand_in(self) -> bool:
        return True

    def forward_decode(self, q: torch.Tensor, layer_id: int, forward_batch: ForwardBatch) -> torch.Tensor:
        k_cache, v_cache = forward_batch.kv_cache.get_kv(layer_id)
        return padded_attention(q, k_cache, v_cache, forward_batch.attn_metadata.layout, self.ctx.scaling)

    def forward_extend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, forward_batch: ForwardBatch
    ) -> torch.Tensor:
        return self.forward_decode(q, layer_id, forward_batch)
