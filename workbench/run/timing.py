"""Timing, as one observer of the run (``workbench.engine.hooks``): every forward pass, every
``init_forward_metadata`` call, the attention layers of each forward and the DP collectives, into the
run's ``Metrics``. ``warm_up`` runs one request's prefill and decode round with the metrics muted (on every
rank) so the first launches count as setup, not generation; ``apply_dtype`` and ``tensor_device`` act on a built worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.hooks import Observer
from workbench.engine.metrics import Metrics
from workbench.models.tokenizer import encode

WARMUP_PROMPT = "Warm-up."
WARMUP_NEW_TOKENS = 64  # more than prefill + one round produce: the round ends with a draft-extend


class Timing(Observer):
    """Samples keyed ``model/FORWARD_MODE`` (e.g. ``target/TARGET_VERIFY``): ``forward_s`` per forward
    (IDLE ones in ``forward_s_idle``), ``metadata_s`` per ``init_forward_metadata`` call,
    ``attention_s`` summed over the layers of one forward; with ``dp``, ``collective_s`` per forward
    (``forward/busy`` or ``forward/idle``: the token-count all_gather plus the MLP collectives with
    their shard compute) and per scheduling decision (``any_rank``)."""

    def __init__(self, metrics: Metrics, dp: bool = False) -> None:
        self.metrics, self.dp = metrics, dp
        self.attention_s = 0.0  # this forward's attention so far
        self.collective_s = 0.0  # this forward's collectives so far

    def on_forward_start(self, model: str, forward_batch: ForwardBatch) -> None:
        self.attention_s = self.collective_s = 0.0

    def on_attention(self, layer_id: int, forward_batch: ForwardBatch, seconds: float) -> None:
        self.attention_s += seconds

    def on_collective(self, name: str, seconds: float) -> None:
        if name == "any_rank":
            self.metrics.add_sample("collective_s", "any_rank", seconds)
        else:
            self.collective_s += seconds

    def on_metadata(self, model: str, forward_batch: ForwardBatch, seconds: float) -> None:
        self.metrics.add_sample("metadata_s", f"{model}/{forward_batch.forward_mode.name}", seconds)

    def on_forward(self, model: str, forward_batch: ForwardBatch, seconds: float) -> None:
        key, idle = f"{model}/{forward_batch.forward_mode.name}", forward_batch.forward_mode.is_idle()
        if self.dp:
            self.metrics.add_sample("collective_s", "forward/" + ("idle" if idle else "busy"), self.collective_s)
        if idle:
            self.metrics.add_sample("forward_s_idle", key, seconds)
        else:
            self.metrics.add_sample("forward_s", key, seconds)
            self.metrics.add_sample("attention_s", key, self.attention_s)


def _runners(worker: Any) -> dict[str, Any]:
    out = {"target": worker.target}
    if getattr(worker, "draft", None) is not None:
        out["draft"] = worker.draft
    return out


def apply_dtype(worker: Any, dtype: str) -> None:
    """Cast both models' weights and KV buffers to ``dtype`` (``float32``: nothing to do)."""
    if dtype == "float32":
        return
    dt = getattr(torch, dtype)
    for runner in _runners(worker).values():
        runner.model.to(dt)
        kv = runner.kv_cache
        kv.k_buffers = [b.to(dt) for b in kv.k_buffers]
        kv.v_buffers = [b.to(dt) for b in kv.v_buffers]


def tensor_device(worker: Any) -> str:
    """The device the run's tensors are on (the target's KV buffer), e.g. ``cpu`` or ``cuda:0``."""
    return str(worker.target.kv_cache.k_buffers[0].device)


def warm_up(worker: Any, metrics: Metrics, make_req: Callable[..., Any]) -> float:
    """One request's prefill and one decode round, nothing recorded, its memory freed; returns seconds.

    The request is long enough not to finish in that round, so the round runs every forward mode a
    busy rank runs (EAGLE3: target and draft EXTEND, draft DECODE, TARGET_VERIFY, DRAFT_EXTEND;
    greedy: EXTEND, DECODE). It bypasses the scheduler, so under DP every rank runs exactly these
    forwards with the same request and the collectives line up; no rank is idle, so the warm-up
    never takes the idle draft-extend path a regressed revision crashes on (that stays in generation).
    IDLE forwards are not warmed. While ``metrics.muted``, the run's observers record, stream and
    inject nothing (``workbench.run.rank_run.observers``)."""
    t0 = time.perf_counter()
    metrics.muted = True
    try:
        with torch.inference_mode():  # as Scheduler.run
            batch = worker.prefill([make_req(-1, encode(WARMUP_PROMPT), WARMUP_NEW_TOKENS)])
            batch = worker.decode(batch)
            worker.release(batch, torch.ones(len(batch), dtype=torch.bool))
    finally:
        metrics.muted = False
    return time.perf_counter() - t0
