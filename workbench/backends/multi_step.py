"""The draft-decode side of a backend, as upstream's ``*MultiStepDraftBackend``.

Upstream plans every step of a multi-step draft at once (``TritonMultiStepDraftBackend.
init_forward_metadata``) and hands each step's ``kv_indptr`` / ``kv_indices`` to that step's
backend through ``spec_info``. Here each draft step runs over the branch rows the EAGLE worker
wrote into ``req_to_token`` (one row per request x branch: the request's slots, then the
branch's own path), so a step's indices are those rows' first ``seq_lens`` slots. ``plan``
computes what all steps share once per draft; ``init_forward_metadata`` then builds one step's
metadata: ``spec_info.kv_indptr`` / ``kv_indices`` where the backend reads them, then the
backend's ``init_draft_decode_metadata``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.backends.base import AttentionBackend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.engine.forward_batch import ForwardBatch


@dataclass
class DraftDecodePlan:
    """One draft's steps over R = bs * topk branch rows.

    rows (R,) the branch rows of req_to_token; prefix (R,) their request's length; step i
    (1-based) attends to columns < prefix + i of its row. valid (steps - 1, R, W) bool is that
    mask per step, W = max_prefix + steps - 1; q_index (R, 1) / q_valid (R, 1): one query per row.
    """

    rows: torch.Tensor
    prefix: torch.Tensor
    max_prefix: int
    valid: torch.Tensor
    q_index: torch.Tensor
    q_valid: torch.Tensor


class MultiStepDraftBackend:
    """Wraps the draft model's backend for the DECODE forwards of a multi-step draft."""

    def __init__(self, backend: AttentionBackend) -> None:
        self.backend = backend
        self.current: DraftDecodePlan | None = None

    def plan(self, rows: torch.Tensor, prefix: torch.Tensor, num_steps: int) -> DraftDecodePlan:
        """Once per draft: rows, prefix (R,) int64; num_steps = the draft's steps (num_steps - 1 forwards)."""
        max_prefix = int(prefix.max())
        cols = torch.arange(max_prefix + num_steps - 1)
        ends = prefix.unsqueeze(0) + torch.arange(1, num_steps).unsqueeze(1)  # (steps - 1, R)
        r = rows.shape[0]
        self.current = DraftDecodePlan(
            rows,
            prefix,
            max_prefix,
            cols < ends.unsqueeze(2),
            torch.arange(r).view(r, 1),
            torch.ones(r, 1, dtype=torch.bool),
        )
        return self.current

    def init_forward_metadata(self, forward_batch: ForwardBatch, step: int) -> None:
        """forward_batch: draft step ``step`` (1-based) over the planned rows, ``spec_info`` an
        ``EagleDraftInput``. Sets ``spec_info.kv_indptr`` (R+1,) / ``kv_indices`` (nnz,) where
        the backend reads them, then the step's metadata. The run's observers get the whole step's
        time as one ``init_forward_metadata`` call of the draft (``on_metadata``)."""
        fb = forward_batch
        t0 = fb.hooks.clock() if fb.hooks.times_metadata else 0.0
        if self.backend.reads_spec_kv_indptr:
            fb.spec_info.kv_indptr, fb.spec_info.kv_indices = seq_lens_kv_metadata(
                fb.req_to_token_pool.req_to_token, fb.req_pool_indices, fb.seq_lens, self.backend.ops.build_kv_indices
            )
        self.backend.init_draft_decode_metadata(fb, self.current, step)
        if fb.hooks.times_metadata:
            fb.hooks.on_metadata("draft", fb, fb.hooks.clock() - t0)
