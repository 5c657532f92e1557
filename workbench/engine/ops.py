"""Small batch-bookkeeping ops the workers use (writing slots into ``req_to_token``, packing)."""
from __future__ import annotations

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
    req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, lens: torch.Tensor, slots: torch.Tensor
) -> None:
    """req_to_token[rows[i], starts[i] : starts[i] + lens[i]] = the i-th run of ``slots`` (packed)."""
    if slots.numel() == 0:
        return
    cols = ragged_arange(starts, lens)
    req_to_token[torch.repeat_interleave(rows, lens), cols] = slots.to(req_to_token.dtype)


def gather_req_to_token(req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Packed slots req_to_token[rows[i], starts[i] : starts[i] + lens[i]]: (sum(lens),) int64."""
    cols = ragged_arange(starts, lens)
    return req_to_token[torch.repeat_interleave(rows, lens), cols].long()
