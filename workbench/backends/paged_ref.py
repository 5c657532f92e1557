"""Torch reference of paged attention over flat kv indices: the compute of the flashinfer and
fa3 stand-ins when those libraries are not importable (every result names it a stand-in)."""
from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F


def paged_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    scale: float,
    causal: bool,
    masks: Optional[List[Optional[torch.Tensor]]] = None,
) -> torch.Tensor:
    """q: (T, Hq, D); k/v_cache: (slots, Hkv, D); qo_indptr, kv_indptr: (bs+1,); kv_indices: (nnz,).

    Request i's queries q[qo_indptr[i]:qo_indptr[i+1]] attend to the slots
    kv_indices[kv_indptr[i]:kv_indptr[i+1]] (its new tokens included, last). ``causal`` aligns
    the queries to the end of the keys; ``masks[i]`` (q_len, kv_len) bool overrides it.
    """
    out = torch.empty_like(q)
    qo, kv = qo_indptr.tolist(), kv_indptr.tolist()
    for i in range(len(qo) - 1):
        qs, qe, ks, ke = qo[i], qo[i + 1], kv[i], kv[i + 1]
        if qe == qs:
            continue
        slots = kv_indices[ks:ke]
        n, m = qe - qs, ke - ks
        mask = masks[i] if masks is not None else None
        if mask is None and causal and n > 1:
            mask = torch.ones(n, m, dtype=torch.bool).tril(m - n)
        o = F.scaled_dot_product_attention(
            q[qs:qe].transpose(0, 1), k_cache[slots].transpose(0, 1), v_cache[slots].transpose(0, 1),
            attn_mask=mask, scale=scale, enable_gqa=True,
        )
        out[qs:qe] = o.transpose(0, 1)
    return out


def split_custom_mask(custom_mask: torch.Tensor, q_lens: List[int], kv_lens: List[int]) -> List[torch.Tensor]:
    """The flat target-verify mask as per-request (q_len, kv_len) blocks."""
    out, off = [], 0
    for n, m in zip(q_lens, kv_lens):
        out.append(custom_mask[off : off + n * m].view(n, m))
        off += n * m
    return out
