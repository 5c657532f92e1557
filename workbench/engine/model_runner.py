"""One model with its KV buffers and attention backend; runs ``ForwardBatch``es.

Target and draft share the request table and the slot allocator (as in SGLang); each owns its
KV buffers and its own backend instance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.backends import AttentionBackend, BackendContext, MultiStepDraftBackend, create_backend
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.engine.hooks import NO_HOOKS, Hooks
from workbench.mem.pool import KVCache, ReqToTokenPool, TokenSlotAllocator
from workbench.models.eagle3 import Eagle3Head


def init_metadata_for(backend: AttentionBackend, fb: ForwardBatch) -> bool:
    """``init_forward_metadata`` as the model runner calls it: an IDLE batch of size 0 (no DP
    padding) never reaches it. Returns whether it was called."""
    if fb.forward_mode.is_idle() and fb.batch_size == 0:
        return False
    backend.init_forward_metadata(fb)
    return True


@dataclass
class Memory:
    """The pools both runners share."""

    req_to_token_pool: ReqToTokenPool
    allocator: TokenSlotAllocator


class ModelRunner:
    def __init__(
        self,
        model: torch.nn.Module,
        backend: str,
        memory: Memory,
        capacity: int,
        dp_comm: object | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        cfg = model.config
        self.model = model
        self.memory = memory
        self.dp_comm = dp_comm
        self.hooks = hooks
        self.is_draft = isinstance(model, Eagle3Head)
        self.name = "draft" if self.is_draft else "target"
        self.kv_cache = KVCache(cfg.num_layers, capacity, cfg.num_kv_heads, cfg.head_dim, torch.float32)
        self.attn_backend = create_backend(
            backend,
            BackendContext(memory.req_to_token_pool, self.kv_cache, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim),
        )
        self.draft_attn_backend = MultiStepDraftBackend(self.attn_backend) if self.is_draft else None

    def make_batch(self, forward_mode: ForwardMode, **kw) -> ForwardBatch:
        bs = int(kw["seq_lens"].shape[0])
        return ForwardBatch(
            forward_mode=forward_mode,
            batch_size=bs,
            req_to_token_pool=self.memory.req_to_token_pool,
            kv_cache=self.kv_cache,
            attn_backend=self.attn_backend,
            dp_comm=self.dp_comm,
            hooks=self.hooks,
            **kw,
        )

    def idle_batch(self, spec_info: object | None = None) -> ForwardBatch:
        """An IDLE batch: size 0 alone, padded to one row (slot 0, req row 0, seq_len 1) under DP attention."""
        bs = 1 if self.dp_comm is not None else 0
        zeros = torch.zeros(bs, dtype=torch.int64)
        return self.make_batch(
            ForwardMode.IDLE,
            input_ids=zeros,
            positions=zeros,
            req_pool_indices=zeros,
            seq_lens=torch.ones(bs, dtype=torch.int64),
            out_cache_loc=zeros,
            spec_info=spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            is_padded_idle=bs > 0,
        )

    @torch.inference_mode()
    def forward(
        self, fb: ForwardBatch, hidden: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Runs the model: the target returns (hidden (T, H), aux (T, 3H)), the draft hidden (T, H).
        A batch whose ``attn_metadata`` is already set (a multi-step draft step, built by the
        ``MultiStepDraftBackend``) skips ``init_forward_metadata``, as upstream's ``skip_attn_backend_init``."""
        if fb.dp_comm is not None:
            fb.dp_comm.begin_forward(fb)
        if fb.forward_mode.is_idle():
            return self.forward_idle(fb, hidden)
        if fb.attn_metadata is None:
            if self.hooks.times_metadata:
                t0 = self.hooks.clock()
                self.attn_backend.init_forward_metadata(fb)
                self.hooks.on_metadata(self.name, fb, self.hooks.clock() - t0)
            else:
                self.attn_backend.init_forward_metadata(fb)
        return self._run(fb, hidden)

    def forward_idle(
        self, fb: ForwardBatch, hidden: torch.Tensor | None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """As upstream: metadata only for a non-empty (padded) idle batch; the layers still run so
        the MLP collectives line up across DP ranks."""
        t0 = self.hooks.clock() if self.hooks.times_metadata else 0.0
        if init_metadata_for(self.attn_backend, fb) and self.hooks.times_metadata:
            self.hooks.on_metadata(self.name, fb, self.hooks.clock() - t0)
        return self._run(fb, hidden)

    def _run(self, fb: ForwardBatch, hidden: torch.Tensor | None):
        if self.is_draft:
            if hidden is None:
                hidden = torch.zeros(fb.num_tokens, self.model.config.hidden_size)
            return self.model(fb.input_ids, fb.positions, hidden, fb)
        return self.model(fb.input_ids, fb.positions, fb)
