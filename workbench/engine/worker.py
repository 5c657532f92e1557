"""Worker base (memory, target runner, prefill, bookkeeping) and the plain greedy worker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from workbench.engine.forward_mode import CaptureHiddenMode, ForwardMode
from workbench.engine.hooks import NO_HOOKS, Hooks
from workbench.engine.metrics import Metrics
from workbench.engine.model_runner import Memory, ModelRunner
from workbench.engine.ops import gather_req_to_token, indptr_from_lens, ragged_arange
from workbench.engine.schedule_batch import Req, ScheduleBatch
from workbench.mem.pool import ReqToTokenPool, TokenSlotAllocator

if TYPE_CHECKING:
    from workbench.backends.base import AttentionBackend
    from workbench.engine.forward_batch import ForwardBatch


class WorkerBase:
    """Owns the shared pools and the target runner; records where each forward happens and tells the
    run's observers (``hooks``, see ``workbench.engine.hooks``) about phases and forwards."""

    def __init__(
        self,
        target: torch.nn.Module,
        backend: str,
        max_running: int,
        max_context_len: int,
        extra_rows: int = 0,
        extra_slots: int = 0,
        dp_comm: object | None = None,
        metrics: Metrics | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        capacity = max_running * max_context_len + extra_slots
        self.memory = Memory(
            ReqToTokenPool(max_running + extra_rows + 1, max_context_len), TokenSlotAllocator(capacity)
        )
        self.memory.req_to_token_pool.alloc(1)  # row 0: the row padded IDLE rows point at
        self.max_context_len = max_context_len
        self.dp_comm = dp_comm
        self.hooks = hooks
        self.target = ModelRunner(target, backend, self.memory, capacity, dp_comm, hooks)
        self.metrics = metrics or Metrics()
        self.ops = self.target.attn_backend.ops  # the bookkeeping ops this backend's runs use
        self.current: dict[str, object] = {}  # phase / forward_mode / batch_size of the forward in flight

    @property
    def backend(self) -> AttentionBackend:
        return self.target.attn_backend

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """One phase of a round; its latency counts as idle when its forwards were IDLE (a DP rank
        without requests)."""
        t0 = time.perf_counter()
        self.current = {"phase": name}
        self.hooks.on_phase_start(name)
        yield
        seconds, idle = time.perf_counter() - t0, self.current.get("forward_mode") == "IDLE"
        self.metrics.add_latency(name, seconds, idle)
        self.hooks.on_phase(name, seconds, idle)

    def run(self, runner: ModelRunner, fb: ForwardBatch, hidden: torch.Tensor | None = None) -> Any:
        """One forward of ``runner``, with the observers told before, after, or of its exception."""
        self.current.update(forward_mode=fb.forward_mode.name, batch_size=fb.batch_size)
        hooks = self.hooks
        hooks.on_forward_start(runner.name, fb)
        t0 = hooks.clock() if hooks.times_forwards else 0.0
        try:
            out = runner.forward(fb, hidden)
        except Exception as exc:
            hooks.on_forward_error(runner, fb, exc)  # crash capture (workbench.debug.capture) sees the batch here
            raise
        if hooks.times_forwards:
            hooks.on_forward(runner.name, fb, hooks.clock() - t0)
        return out

    def check_fits(self, reqs: list[Req], extra: int) -> None:
        for r in reqs:
            need = len(r.prompt_ids) + r.max_new_tokens + extra
            if need > self.max_context_len:
                raise ValueError(
                    f"request {r.rid}: prompt {len(r.prompt_ids)} + max_new_tokens {r.max_new_tokens} + {extra} "
                    f"exceeds the context of {self.max_context_len} tokens"
                )

    def prefill_target(self, reqs: list[Req]) -> tuple[ScheduleBatch, ForwardBatch, torch.Tensor, torch.Tensor]:
        """Target EXTEND over the prompts. Returns (batch, its ForwardBatch, aux (T, 3H), slots (T,))."""
        pool = self.memory.req_to_token_pool
        rows = torch.tensor(pool.alloc(len(reqs)), dtype=torch.int64)
        for r, row in zip(reqs, rows.tolist(), strict=False):
            r.req_pool_idx = row
        lens = torch.tensor([len(r.prompt_ids) for r in reqs], dtype=torch.int64)
        slots = self.memory.allocator.alloc(int(lens.sum()))
        zeros = torch.zeros_like(lens)
        self.ops.assign(pool.req_to_token, rows, zeros, lens, slots)
        positions = ragged_arange(zeros, lens)
        input_ids = torch.tensor([t for r in reqs for t in r.prompt_ids], dtype=torch.int64)
        fb = self.target.make_batch(
            ForwardMode.EXTEND,
            input_ids=input_ids,
            positions=positions,
            req_pool_indices=rows,
            seq_lens=lens,
            out_cache_loc=slots,
            extend_seq_lens=lens,
            extend_prefix_lens=zeros,
            capture_hidden_mode=CaptureHiddenMode.FULL,
        )
        hidden, aux = self.run(self.target, fb)
        last = indptr_from_lens(lens)[1:] - 1
        first = self.target.model.logits(hidden[last]).argmax(-1)
        for r, t in zip(reqs, first.tolist(), strict=False):
            r.append([t])
        batch = ScheduleBatch(reqs, rows, lens.clone(), first)
        return batch, fb, aux, slots

    def release(self, batch: ScheduleBatch, done: torch.Tensor) -> None:
        """Free the KV slots and request rows of the requests flagged in ``done`` (bs,) bool."""
        idx = done.nonzero().flatten()
        if idx.numel() == 0:
            return
        rows, lens = batch.req_pool_indices[idx], batch.seq_lens[idx]
        slots = gather_req_to_token(self.memory.req_to_token_pool.req_to_token, rows, torch.zeros_like(lens), lens)
        self.memory.allocator.free(slots)
        self.memory.req_to_token_pool.free(rows.tolist())

    def finished_mask(self, batch: ScheduleBatch) -> torch.Tensor:
        return torch.tensor([r.finished for r in batch.reqs], dtype=torch.bool)


class GreedyWorker(WorkerBase):
    """Plain greedy decoding with the target alone: the reference EAGLE3 must equal."""

    def prefill(self, reqs: list[Req]) -> ScheduleBatch:
        with self.phase("prefill"):
            batch, _, _, _ = self.prefill_target(reqs)
        return batch

    def prefill_idle(self) -> None:
        with self.phase("prefill"):
            self.run(self.target, self.target.idle_batch())

    def decode(self, batch: ScheduleBatch) -> ScheduleBatch:
        """One DECODE step: the last token gets its KV and the target predicts the next."""
        with self.phase("decode"):
            slots = self.memory.allocator.alloc(len(batch))
            table = self.memory.req_to_token_pool.req_to_token
            table[batch.req_pool_indices, batch.seq_lens] = slots.to(table.dtype)
            fb = self.target.make_batch(
                ForwardMode.DECODE,
                input_ids=batch.output_ids,
                positions=batch.seq_lens.clone(),
                req_pool_indices=batch.req_pool_indices,
                seq_lens=batch.seq_lens + 1,
                out_cache_loc=slots,
            )
            hidden, _ = self.run(self.target, fb)
            nxt = self.target.model.logits(hidden).argmax(-1)
            batch.seq_lens = batch.seq_lens + 1
            batch.output_ids = nxt
            for r, t in zip(batch.reqs, nxt.tolist(), strict=False):
                r.append([t])
        return batch

    def decode_idle(self) -> None:
        with self.phase("decode"):
            self.run(self.target, self.target.idle_batch())
