"""The batch-bookkeeping ops (writing slots into ``req_to_token``, reading them back, the
draft-extend inputs), one torch version each, and the backend-chosen set the workers call.

A backend names its set in ``AttentionBackend.ops``: ``TRITON_OPS`` runs the speculative helper
kernels of ``kernels`` (as upstream's triton path does), ``TORCH_OPS`` their torch versions (the
kernels' ``*_ref``). In Triton's CPU interpreter each launch costs ~0.1 s, which would swamp the
per-step timings of the torch-computed backends. Ops are looked up in ``kernels`` when called,
so no kernel module loads before ``workbench_kernels.setup()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import workbench_kernels
from workbench_kernels.ragged import indptr_from_lens, ragged_arange

__all__ = ["BookkeepingOps", "TORCH_OPS", "TRITON_OPS", "gather_req_to_token", "indptr_from_lens", "ragged_arange"]


@dataclass(frozen=True)
class BookkeepingOps:
    """Three ops with the keyword signatures of the Triton kernels of the same names;
    ``suffix`` "" picks the kernels, "_ref" their torch versions."""

    name: str
    suffix: str

    def _op(self, op: str) -> Any:
        return getattr(workbench_kernels, op + self.suffix)

    def assign_req_to_token_pool(self, **kw: torch.Tensor) -> None:
        self._op("assign_req_to_token_pool")(**kw)

    def build_kv_indices(self, **kw: torch.Tensor) -> None:
        self._op("build_kv_indices")(**kw)

    def draft_extend_positions_and_bonus(self, **kw: torch.Tensor) -> None:
        self._op("draft_extend_positions_and_bonus")(**kw)

    def assign(
        self,
        req_to_token: torch.Tensor,
        rows: torch.Tensor,
        starts: torch.Tensor,
        lens: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        """req_to_token[rows[i], starts[i] : starts[i] + lens[i]] = the i-th run of ``slots`` (packed)."""
        if slots.numel():
            self.assign_req_to_token_pool(
                req_pool_indices=rows.long(),
                req_to_token=req_to_token,
                start_offset=starts.long(),
                end_offset=(starts + lens).long(),
                out_cache_loc=slots.long(),
            )

    def draft_extend_inputs(
        self, prefix: torch.Tensor, n_new: torch.Tensor, packed_tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions (T,) = prefix[i] + arange(n_new[i]) per request, and each request's last token (bs,)."""
        positions, last = torch.empty_like(packed_tokens), torch.empty_like(n_new)
        self.draft_extend_positions_and_bonus(
            seq_lens_before=prefix.long(),
            accept_lens=n_new.long(),
            packed_tokens=packed_tokens,
            positions=positions,
            bonus_tokens=last,
        )
        return positions, last


TORCH_OPS = BookkeepingOps("torch", "_ref")
TRITON_OPS = BookkeepingOps("triton", "")


def gather_req_to_token(
    req_to_token: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, lens: torch.Tensor
) -> torch.Tensor:
    """Packed slots req_to_token[rows[i], starts[i] : starts[i] + lens[i]]: (sum(lens),) int64 (torch)."""
    indptr = indptr_from_lens(lens.long())
    out = torch.empty(int(indptr[-1]), dtype=torch.int64)
    TORCH_OPS.build_kv_indices(
        req_to_token=req_to_token,
        req_pool_indices=rows,
        seq_lens=lens,
        kv_indptr=indptr,
        kv_indices=out,
        kv_start_idx=starts,
    )
    return out
