"""Packed ragged batches in torch: offsets from lengths, and per-request index runs.

Every ``indptr`` in the workbench (kv_indptr, qo_indptr, mask_indptr, cu_seqlens) is
``indptr_from_lens``; a request's last packed row is ``indptr[1:] - 1``.
"""

from __future__ import annotations

import torch


def indptr_from_lens(lens: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """lens (n,) -> (n+1,) exclusive prefix sums, starting at 0, on lens' device."""
    out = torch.zeros(lens.shape[0] + 1, dtype=dtype, device=lens.device)
    torch.cumsum(lens, 0, out=out[1:])
    return out


def ragged_arange(starts: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """Concatenation of arange(s, s + n) for each (s, n): (sum(lens),) int64."""
    lens = lens.long()
    offsets = indptr_from_lens(lens)
    total = int(offsets[-1])
    within = torch.arange(total, device=lens.device) - torch.repeat_interleave(offsets[:-1], lens, output_size=total)
    return torch.repeat_interleave(starts.long(), lens, output_size=total) + within
