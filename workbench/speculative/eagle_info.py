"""Spec-info objects the forward passes carry, mirroring SGLang's ``eagle_info.py``.

``EagleDraftInput`` rides on draft passes (and, before PR #24860, on draft-extend too);
``EagleVerifyInput`` on target-verify. The draft-extend class of PR #24860 lives in
``eagle_draft_extend_pr24860`` and the fixed one of PR #28221 in ``eagle_draft_extend_pr28221``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from workbench.engine.forward_mode import CaptureHiddenMode
from workbench.speculative.spec_info import SpecInput, SpecInputType


@dataclass
class EagleDraftInput(SpecInput):
    """State between rounds (``ScheduleBatch.spec_info``) and the spec_info of draft passes.

    topk_p, topk_index: (bs, topk) the draft's first-step candidates; hidden_states: (bs, H) the
    draft state that predicted them, or on a pass (T, 3H) / (rows, H); verified_id: (bs,) the
    last verified token (no KV yet) or, for draft-extend, the input tokens (T,). kv_indptr
    (rows+1,) / kv_indices (nnz,) are set only for multi-step draft decode, one row per (request,
    branch); None everywhere else (backends then use seq_lens).
    """

    topk_p: torch.Tensor | None = None
    topk_index: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None
    verified_id: torch.Tensor | None = None
    accept_length: torch.Tensor | None = None
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.FULL
    kv_indptr: torch.Tensor | None = None
    kv_indices: torch.Tensor | None = None
    num_tokens_per_req: int = -1

    def __post_init__(self) -> None:
        super().__init__(SpecInputType.EAGLE_DRAFT)

    _BATCH_FIELDS = ("topk_p", "topk_index", "hidden_states", "verified_id")

    def filter_batch(self, new_indices: torch.Tensor) -> EagleDraftInput:
        """The round state of the requests at ``new_indices`` (k,) int64."""
        return EagleDraftInput(**{f: getattr(self, f)[new_indices] for f in self._BATCH_FIELDS})

    def merge_batch(self, other: EagleDraftInput) -> EagleDraftInput:
        """The round state of this batch followed by ``other``'s."""
        return EagleDraftInput(**{f: torch.cat((getattr(self, f), getattr(other, f))) for f in self._BATCH_FIELDS})

    @classmethod
    def create_idle_input(
        cls, device: str, hidden_size: int, dtype: torch.dtype, topk: int, capture_hidden_mode: CaptureHiddenMode
    ) -> EagleDraftInput:
        return cls(
            topk_p=torch.empty((0, topk), dtype=torch.float32, device=device),
            topk_index=torch.empty((0, topk), dtype=torch.int64, device=device),
            hidden_states=torch.empty((0, hidden_size), dtype=dtype, device=device),
            verified_id=torch.empty((0,), dtype=torch.int64, device=device),
            accept_length=torch.empty((0,), dtype=torch.int64, device=device),
            capture_hidden_mode=capture_hidden_mode,
        )


@dataclass
class EagleVerifyInput(SpecInput):
    """The draft tree the target verifies (N = draft_token_num tokens per request, root first).

    draft_token: (bs*N,); custom_mask: flat bool, per request a (N, prefix+N) block;
    positions: (bs*N,); retrive_index / retrive_next_token / retrive_next_sibling: (bs, N),
    -1 where there is no such node.
    """

    draft_token: torch.Tensor
    custom_mask: torch.Tensor
    positions: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor
    spec_steps: int
    topk: int
    draft_token_num: int
    capture_hidden_mode: CaptureHiddenMode = CaptureHiddenMode.FULL
    seq_lens_sum: int = 0

    def __post_init__(self) -> None:
        super().__init__(SpecInputType.EAGLE_VERIFY)

    @classmethod
    def create_idle_input(cls, topk: int, spec_steps: int, num_verify_tokens: int) -> EagleVerifyInput:
        empty = torch.empty((0,), dtype=torch.int64)
        return cls(
            draft_token=empty,
            custom_mask=torch.empty((0,), dtype=torch.bool),
            positions=empty,
            retrive_index=torch.empty((0, num_verify_tokens), dtype=torch.int64),
            retrive_next_token=torch.empty((0, num_verify_tokens), dtype=torch.int64),
            retrive_next_sibling=torch.empty((0, num_verify_tokens), dtype=torch.int64),
            spec_steps=spec_steps,
            topk=topk,
            draft_token_num=num_verify_tokens,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )


@dataclass
class EagleVerifyOutput:
    """What target-verify decided, per request; ``filter(keep)`` keeps requests. (bs, N) int64 unless said.

    tree_tokens: the tree's tokens, root first; path: node indices of root + accepted drafts,
    padded with -1; accept_length (bs,): accepted drafts (root and bonus excluded); bonus (bs,):
    the target's token after the last accepted node; aux_states (bs, N, 3H) float: the target's
    states at every node; slots: the KV slot of every node.
    """

    tree_tokens: torch.Tensor
    path: torch.Tensor
    accept_length: torch.Tensor
    bonus: torch.Tensor
    aux_states: torch.Tensor
    slots: torch.Tensor

    def filter(self, keep: torch.Tensor) -> EagleVerifyOutput:
        """keep: (bs,) bool."""
        return EagleVerifyOutput(*(getattr(self, f.name)[keep] for f in fields(self)))
