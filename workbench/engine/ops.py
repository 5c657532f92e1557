"""Small batch-bookkeeping ops the workers use (writing slots into ``req_to_token``, packing).

With ``use_kernels`` the writes go through the speculative helper kernels of
``kernels.spec_helpers`` (Triton), as upstream's triton path does; the triton backend's runs use
them. The other backends use the torch versions: in Triton's CPU interpreter each launch costs
~0.1 s, which would swamp the per-step timings of the torch-computed backends.
"""
from __future__ import annotations

import kernels
from typing import Tuple

import torch


def ragged_arange(starts: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Concatenation of arange(s, s + n) for each (s, n): (sum(lens),) int64."""
    total = int(lens.sum())
    if total == 0:
        return torch.empty(0, dtype=torch.int64)
    offsets = torch.cumsum(lens, 0) - lens
    within = torch.arange(total) - torch.repeat_interleave(offsets, lens)
    return torch.repeat_interleave(starts, lens) + within


def assign_req_to_token(
    req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, lens: torch.Tensor, slots: torch.Tensor,
    use_kernels: bool = False,
) -> None:
    """req_to_token[rows[i], starts[i] : starts[i] + lens[i]] = the i-th run of ``slots`` (packed)."""
    if slots.numel() == 0:
        return
    if use_kernels:
        kernels.assign_req_to_token_pool(
            req_pool_indices=rows.to(torch.int64), req_to_token=req_to_token, start_offset=starts.to(torch.int64),
            end_offset=(starts + lens).to(torch.int64), out_cache_loc=slots.to(torch.int64),
        )
        return
    req_to_token[torch.repeat_interleave(rows, lens), ragged_arange(starts, lens)] = slots.to(req_to_token.dtype)


def draft_extend_positions(prefix: torch.Tensor, n_new: torch.Tensor, packed_tokens: torch.Tensor,
                           use_kernels: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Positions (T,) = prefix[i] + arange(n_new[i]) per request, and each request's last token (bs,)."""
    if not use_kernels:
        return ragged_arange(prefix, n_new), packed_tokens[torch.cumsum(n_new, 0) - 1]
    positions = torch.empty_like(packed_tokens)
    last = torch.empty_like(n_new)
    kernels.draft_extend_positions_and_bonus(
        seq_lens_before=prefix.to(torch.int64), accept_lens=n_new.to(torch.int64), packed_tokens=packed_tokens,
        positions=positions, bonus_tokens=last,
    )
    return positions, last


def gather_req_to_token(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Packed slots req_to_token[rows[i], starts[i] : starts[i] + lens[i]]: (sum(lens),) int64."""
    cols = ragged_arange(starts, lens)
    return req_to_token[torch.repeat_interleave(rows, lens), cols].long()
