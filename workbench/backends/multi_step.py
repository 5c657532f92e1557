"""The draft-decode side of a backend, as upstream's ``*MultiStepDraftBackend``.

Upstream builds the draft-decode ``kv_indptr`` / ``kv_indices`` of every step in the multi-step
draft backend (``TritonMultiStepDraftBackend.init_forward_metadata``) and hands them to each
step's backend through ``spec_info``. Here each draft step runs over the branch rows the EAGLE
worker wrote into ``req_to_token`` (one row per request x branch: the prompt's slots, then the
branch's own path), so the indices are those rows' first ``seq_lens`` slots. A backend that does
not read ``spec_info.kv_indptr`` (torch_native, fa3) reads the same rows itself.
"""
from __future__ import annotations

from workbench.backends.base import AttentionBackend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.engine.forward_batch import ForwardBatch


class MultiStepDraftBackend:
    """Wraps the draft model's backend for the DECODE forwards of a multi-step draft."""

    def __init__(self, backend: AttentionBackend) -> None:
        self.backend = backend

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        """forward_batch: one draft step, bs * topk rows, ``spec_info`` an ``EagleDraftInput``.
        Sets ``spec_info.kv_indptr`` (rows+1,) / ``kv_indices`` (nnz,) where the backend reads
        them, then the step's own metadata."""
        fb = forward_batch
        if self.backend.reads_spec_kv_indptr:
            fb.spec_info.kv_indptr, fb.spec_info.kv_indices = seq_lens_kv_metadata(
                fb.req_to_token_pool.req_to_token, fb.req_pool_indices, fb.seq_lens, self.backend.ops.build_kv_indices)
        self.backend.init_forward_metadata(fb)
