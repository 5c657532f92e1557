"""Flat kv_indices from the req_to_token table: the seq_lens path of init_forward_metadata.

One program per batch row copies req_to_token[req_pool_indices[i], start:start+seq_lens[i]]
into kv_indices[kv_indptr[i]:kv_indptr[i] + seq_lens[i]] (kv_indptr[i+1] - kv_indptr[i]).
"""

from __future__ import annotations

import torch

from . import triton_setup
from .ragged import ragged_arange
from .triton_setup import tl, triton  # after set-up: triton sees the interpreter choice


@triton.jit
def _build_kv_indices_kernel(
    req_to_token_ptr,
    req_pool_indices_ptr,
    seq_lens_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    kv_start_idx_ptr,
    stride_req,
    HAS_START: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0)
    row = tl.load(req_pool_indices_ptr + i).to(tl.int64) * stride_req
    out_start = tl.load(kv_indptr_ptr + i)
    length = tl.load(seq_lens_ptr + i)
    if HAS_START:
        row += tl.load(kv_start_idx_ptr + i)
    for off in range(0, length, BLOCK):
        pos = off + tl.arange(0, BLOCK)
        mask = pos < length
        slots = tl.load(req_to_token_ptr + row + pos, mask=mask)
        tl.store(kv_indices_ptr + out_start + pos, slots.to(kv_indices_ptr.dtype.element_ty), mask=mask)


@triton_setup.launcher
def _launch_build_kv_indices(*, req_to_token, req_pool_indices, seq_lens, kv_indptr, kv_indices, kv_start_idx) -> None:
    _build_kv_indices_kernel[(seq_lens.shape[0],)](
        req_to_token,
        req_pool_indices,
        seq_lens,
        kv_indptr,
        kv_indices,
        kv_start_idx if kv_start_idx is not None else seq_lens,
        req_to_token.stride(0),
        HAS_START=kv_start_idx is not None,
        BLOCK=1024,
    )


def build_kv_indices(
    *,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_start_idx: torch.Tensor | None = None,
) -> None:
    """Fill kv_indices with each row's slots from req_to_token.

    req_to_token (max_reqs, max_context_len) int32; req_pool_indices (bs,) int64; seq_lens (bs,)
    int64; kv_indptr (bs+1,) int64 prefix sums of seq_lens; kv_indices (nnz,) int64, written;
    kv_start_idx (bs,) int64 or None (0): the first column read per row. bs 0 is a no-op.
    """
    bs = seq_lens.shape[0]
    if req_pool_indices.shape[0] != bs or kv_indptr.shape[0] != bs + 1:
        raise ValueError(f"req_pool_indices must be (bs,) and kv_indptr (bs+1,) for bs={bs}")
    if kv_start_idx is not None and kv_start_idx.shape[0] != bs:
        raise triton_setup.shape_error("kv_start_idx", kv_start_idx, (bs,))
    if req_to_token.dim() != 2 or req_to_token.stride(1) != 1:
        raise ValueError("req_to_token must be a 2-D table with contiguous rows")
    optional = {} if kv_start_idx is None else {"kv_start_idx": kv_start_idx}
    triton_setup.check_tensors(
        req_to_token=req_to_token,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        **optional,
    )
    if bs == 0:
        return
    _launch_build_kv_indices(
        req_to_token=req_to_token,
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        kv_start_idx=kv_start_idx,
    )


def build_kv_indices_ref(
    *,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_start_idx: torch.Tensor | None = None,
) -> None:
    """Torch version of build_kv_indices, same arguments (fills kv_indices): the kernel's
    reference and the bookkeeping op of every backend that does not run Triton."""
    if seq_lens.shape[0] == 0:
        return
    lens = seq_lens.long()
    starts = kv_start_idx.long() if kv_start_idx is not None else torch.zeros_like(lens)
    total = kv_indices.shape[0]
    rows = torch.repeat_interleave(req_pool_indices.long(), lens, output_size=total)
    kv_indices[ragged_arange(kv_indptr[:-1], lens)] = req_to_token[rows, ragged_arange(starts, lens)].to(
        kv_indices.dtype
    )
