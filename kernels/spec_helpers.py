"""Small EAGLE bookkeeping kernels: writing new slots into req_to_token, draft-extend inputs.

Both run one program per request; a request's offset into the packed input is the sum of
the lengths of the requests before it, computed in the kernel (no host sync).
"""

from __future__ import annotations

import torch

from . import triton_setup
from .ragged import indptr_from_lens, ragged_arange
from .triton_setup import tl, triton  # after set-up: triton sees the interpreter choice


@triton.jit
def _packed_offset(lens_ptr, starts_ptr, i, HAS_STARTS: tl.constexpr, BLOCK: tl.constexpr):
    """sum over j < i of lens[j] (minus starts[j] when HAS_STARTS: lens are then ends)."""
    total = tl.zeros([BLOCK], tl.int64)
    for j0 in range(0, i, BLOCK):
        js = j0 + tl.arange(0, BLOCK)
        mask = js < i
        n = tl.load(lens_ptr + js, mask=mask, other=0).to(tl.int64)
        if HAS_STARTS:
            n -= tl.load(starts_ptr + js, mask=mask, other=0).to(tl.int64)
        total += n
    return tl.sum(total, 0)


@triton.jit
def _assign_req_to_token_kernel(
    req_pool_indices_ptr,
    req_to_token_ptr,
    start_offset_ptr,
    end_offset_ptr,
    out_cache_loc_ptr,
    stride_req,
    BLOCK_BS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0)
    src = _packed_offset(end_offset_ptr, start_offset_ptr, i, True, BLOCK_BS)
    start = tl.load(start_offset_ptr + i)
    length = tl.load(end_offset_ptr + i) - start
    row = tl.load(req_pool_indices_ptr + i).to(tl.int64) * stride_req + start
    for off in range(0, length, BLOCK):
        pos = off + tl.arange(0, BLOCK)
        mask = pos < length
        slots = tl.load(out_cache_loc_ptr + src + pos, mask=mask)
        tl.store(req_to_token_ptr + row + pos, slots.to(req_to_token_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _draft_extend_inputs_kernel(
    seq_lens_before_ptr,
    accept_lens_ptr,
    packed_tokens_ptr,
    positions_ptr,
    bonus_tokens_ptr,
    BLOCK_BS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    i = tl.program_id(0)
    at = _packed_offset(accept_lens_ptr, accept_lens_ptr, i, False, BLOCK_BS)
    n = tl.load(accept_lens_ptr + i).to(tl.int64)
    base = tl.load(seq_lens_before_ptr + i).to(tl.int64)
    for off in range(0, n, BLOCK):
        pos = off + tl.arange(0, BLOCK)
        tl.store(positions_ptr + at + pos, (base + pos).to(positions_ptr.dtype.element_ty), mask=pos < n)
    last = tl.load(packed_tokens_ptr + at + n - 1, mask=n > 0, other=-1)
    tl.store(bonus_tokens_ptr + i, tl.where(n > 0, last, -1).to(bonus_tokens_ptr.dtype.element_ty))


@triton_setup.launcher
def _launch_assign(*, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc) -> None:
    _assign_req_to_token_kernel[(req_pool_indices.shape[0],)](
        req_pool_indices,
        req_to_token,
        start_offset,
        end_offset,
        out_cache_loc,
        req_to_token.stride(0),
        BLOCK_BS=128,
        BLOCK=256,
    )


@triton_setup.launcher
def _launch_draft_extend(*, seq_lens_before, accept_lens, packed_tokens, positions, bonus_tokens) -> None:
    _draft_extend_inputs_kernel[(accept_lens.shape[0],)](
        seq_lens_before,
        accept_lens,
        packed_tokens,
        positions,
        bonus_tokens,
        BLOCK_BS=128,
        BLOCK=64,
    )


def assign_req_to_token_pool(
    *,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
) -> None:
    """Write newly allocated slots into the req_to_token table.

    req_pool_indices (bs,) int64; req_to_token (max_reqs, max_context_len) int32, written;
    start_offset, end_offset (bs,) int64; out_cache_loc (sum(end - start),) int64 slots packed
    per request in batch order: row i gets req_to_token[req_pool_indices[i], start_i:end_i].
    bs 0 is a no-op.
    """
    bs = req_pool_indices.shape[0]
    if start_offset.shape[0] != bs or end_offset.shape[0] != bs:
        raise ValueError(f"start_offset and end_offset must be (bs,) for bs={bs}")
    if req_to_token.dim() != 2 or req_to_token.stride(1) != 1:
        raise ValueError("req_to_token must be a 2-D table with contiguous rows")
    triton_setup.check_tensors(
        req_pool_indices=req_pool_indices,
        req_to_token=req_to_token,
        start_offset=start_offset,
        end_offset=end_offset,
        out_cache_loc=out_cache_loc,
    )
    if bs == 0:
        return
    _launch_assign(
        req_pool_indices=req_pool_indices,
        req_to_token=req_to_token,
        start_offset=start_offset,
        end_offset=end_offset,
        out_cache_loc=out_cache_loc,
    )


def assign_req_to_token_pool_ref(
    *,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
) -> None:
    """Torch version of assign_req_to_token_pool, same arguments (writes req_to_token): the
    kernel's reference and the bookkeeping op of every backend that does not run Triton."""
    if out_cache_loc.numel() == 0:
        return
    lens = (end_offset - start_offset).long()
    rows = torch.repeat_interleave(req_pool_indices.long(), lens, output_size=out_cache_loc.shape[0])
    req_to_token[rows, ragged_arange(start_offset, lens)] = out_cache_loc.to(req_to_token.dtype)


def draft_extend_positions_and_bonus(
    *,
    seq_lens_before: torch.Tensor,
    accept_lens: torch.Tensor,
    packed_tokens: torch.Tensor,
    positions: torch.Tensor,
    bonus_tokens: torch.Tensor,
) -> None:
    """Inputs of the draft-extend batch after verification.

    seq_lens_before (bs,) int64: each request's length before this step's accepted tokens;
    accept_lens (bs,) int32/int64: accepted tokens per request, bonus included;
    packed_tokens (sum(accept_lens),) the accepted tokens packed per request.
    Writes positions (sum(accept_lens),) int64 = seq_lens_before[i] + arange(accept_lens[i]) per
    request, and bonus_tokens (bs,) = each request's last accepted token (-1 where accept_lens
    is 0). bs 0 is a no-op.
    """
    bs = accept_lens.shape[0]
    if seq_lens_before.shape[0] != bs or bonus_tokens.shape[0] != bs:
        raise ValueError(f"seq_lens_before and bonus_tokens must be (bs,) for bs={bs}")
    if positions.shape[0] != packed_tokens.shape[0]:
        raise ValueError("positions and packed_tokens must both be (sum(accept_lens),)")
    triton_setup.check_tensors(
        seq_lens_before=seq_lens_before,
        accept_lens=accept_lens,
        packed_tokens=packed_tokens,
        positions=positions,
        bonus_tokens=bonus_tokens,
    )
    if bs == 0:
        return
    _launch_draft_extend(
        seq_lens_before=seq_lens_before,
        accept_lens=accept_lens,
        packed_tokens=packed_tokens,
        positions=positions,
        bonus_tokens=bonus_tokens,
    )


def draft_extend_positions_and_bonus_ref(
    *,
    seq_lens_before: torch.Tensor,
    accept_lens: torch.Tensor,
    packed_tokens: torch.Tensor,
    positions: torch.Tensor,
    bonus_tokens: torch.Tensor,
) -> None:
    """Torch version of draft_extend_positions_and_bonus, same arguments (writes positions and
    bonus_tokens): the kernel's reference and the torch backends' bookkeeping op."""
    if accept_lens.shape[0] == 0:
        return
    lens = accept_lens.long()
    positions.copy_(ragged_arange(seq_lens_before, lens))
    last = (indptr_from_lens(lens)[1:] - 1).clamp(min=0)
    found = packed_tokens[last] if packed_tokens.numel() else torch.zeros_like(lens)
    bonus_tokens.copy_(torch.where(lens > 0, found.to(bonus_tokens.dtype), -1))
