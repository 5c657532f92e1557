"""The seq_lens fallback: plain decode metadata from ``seq_lens`` and ``req_to_token``.

Backends that read ``spec_info.kv_indptr`` take this path when there is no spec_info or its
``kv_indptr`` is None (e.g. the idle draft-extend batch). It is what the fix relies on.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch

IndicesBuilder = Callable[..., None]


def torch_build_kv_indices(
    *, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
    kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
) -> None:
    """Fill kv_indices (nnz,) with req_to_token[req_pool_indices[i], :seq_lens[i]] per row."""
    if seq_lens.numel() == 0:
        return
    max_len = int(seq_lens.max())
    rows = req_to_token[req_pool_indices, :max_len]  # (bs, max_len)
    keep = torch.arange(max_len).unsqueeze(0) < seq_lens.unsqueeze(1)
    kv_indices.copy_(rows[keep].to(kv_indices.dtype))


def seq_lens_kv_metadata(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    builder: Optional[IndicesBuilder] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(kv_indptr (bs+1,) int64, kv_indices (sum(seq_lens),) int64) for a possibly padded batch.

    Padded IDLE rows (seq_len 1, req row 0) get one index each; bs 0 gives kv_indptr [0].
    ``builder`` fills the indices (a Triton kernel for the triton backend; torch by default).
    """
    bs = int(seq_lens.shape[0])
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int64)
    kv_indptr[1:] = torch.cumsum(seq_lens.to(torch.int64), 0)
    kv_indices = torch.empty(int(kv_indptr[-1]), dtype=torch.int64)
    (builder or torch_build_kv_indices)(
        req_to_token=req_to_token, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
        kv_indptr=kv_indptr, kv_indices=kv_indices,
    )
    return kv_indptr, kv_indices
