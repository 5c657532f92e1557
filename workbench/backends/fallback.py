"""The seq_lens fallback: plain decode metadata from ``seq_lens`` and ``req_to_token``.

Backends that read ``spec_info.kv_indptr`` take this path when there is no spec_info or its
``kv_indptr`` is None (e.g. the idle draft-extend batch). It is what the fix relies on.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.engine.ops import TORCH_OPS, indptr_from_lens

IndicesBuilder = Callable[..., None]


def seq_lens_kv_metadata(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    builder: IndicesBuilder | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(kv_indptr (bs+1,) int64, kv_indices (sum(seq_lens),) int64) for a possibly padded batch.

    Padded IDLE rows (seq_len 1, req row 0) get one index each; bs 0 gives kv_indptr [0].
    ``builder`` fills the indices: the backend's ``ops.build_kv_indices`` (torch by default).
    """
    kv_indptr = indptr_from_lens(seq_lens.to(torch.int64))
    kv_indices = torch.empty(int(kv_indptr[-1]), dtype=torch.int64)
    (builder or TORCH_OPS.build_kv_indices)(
        req_to_token=req_to_token,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
    )
    return kv_indptr, kv_indices
