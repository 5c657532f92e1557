"""The draft-extend spec_info as PR #24860 installed it: no ``kv_indptr`` field.

Backends that read ``spec_info.kv_indptr`` for DECODE/IDLE batches raise AttributeError on it
when a DP-padded IDLE draft-extend batch reaches ``init_forward_metadata``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.engine.forward_mode import CaptureHiddenMode
from workbench.speculative.spec_info import SpecInput, SpecInputType


@dataclass
class EagleDraftExtendInput(SpecInput):
    """hidden_states: (T, 3H) target states of the accepted tokens; verified_id: (T,) input
    tokens; accept_length: (bs,) accepted drafts per request (extend length - 1)."""

    hidden_states: torch.Tensor | None = None
    verified_id: torch.Tensor | None = None
    accept_length: torch.Tensor | None = None
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.LAST
    num_tokens_per_req: int = -1
    num_tokens_for_logprob_per_req: int = 1

    def __post_init__(self) -> None:
        super().__init__(SpecInputType.EAGLE_DRAFT_EXTEND)

    @classmethod
    def create_idle_input(
        cls, device: str, hidden_size: int, dtype: torch.dtype, capture_hidden_mode: CaptureHiddenMode
    ) -> EagleDraftExtendInput:
        return cls(
            hidden_states=torch.empty((0, hidden_size), dtype=dtype, device=device),
            verified_id=torch.empty((0,), dtype=torch.int64, device=device),
            accept_length=torch.empty((0,), dtype=torch.int64, device=device),
            capture_hidden_mode=capture_hidden_mode,
        )
