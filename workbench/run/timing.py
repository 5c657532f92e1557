"""Timing hooks wrapped around a built worker from outside (no engine or backend file edited).

``instrument`` times every forward pass, every ``init_forward_metadata`` call and the attention
layers of each forward; ``instrument_comm`` the DP collectives. ``warm_up`` runs one request's prefill
and decode round with the metrics muted (on every rank) so the first launches count as setup, not generation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from workbench.engine.metrics import Metrics

WARMUP_PROMPT = "Warm-up."
WARMUP_NEW_TOKENS = 64  # more than prefill + one round produce: the round ends with a draft-extend


def _runners(worker: Any) -> dict[str, Any]:
    out = {"target": worker.target}
    if getattr(worker, "draft", None) is not None:
        out["draft"] = worker.draft
    return out


def instrument(worker: Any, metrics: Metrics) -> None:
    """Wrap ``worker.run`` and each runner's attention backend (instance attributes) with timers.

    Keys are ``model/FORWARD_MODE`` (e.g. ``target/TARGET_VERIFY``); IDLE forwards go to
    ``forward_s_idle``. Attention time sums ``backend.forward`` over the layers of one forward.
    On CUDA every timer synchronizes first, so a sample is the work's time, not its launch's."""
    attn = {"s": 0.0}
    sync = torch.cuda.synchronize if tensor_device(worker).startswith("cuda") else (lambda: None)
    names = {id(r): n for n, r in _runners(worker).items()}
    for name, runner in _runners(worker).items():
        be = runner.attn_backend
        init, forward = be.init_forward_metadata, be.forward

        def timed_init(fb, _init=init, _name=name):
            sync()
            t0 = time.perf_counter()
            _init(fb)
            sync()
            metrics.add_sample("metadata_s", f"{_name}/{fb.forward_mode.name}", time.perf_counter() - t0)

        def timed_forward(q, k, v, layer_id, fb, _forward=forward):
            sync()
            t0 = time.perf_counter()
            out = _forward(q, k, v, layer_id, fb)
            sync()
            attn["s"] += time.perf_counter() - t0
            return out

        be.init_forward_metadata, be.forward = timed_init, timed_forward
    run = worker.run

    comm = getattr(worker, "dp_comm", None)

    def timed_run(runner, fb, hidden=None):
        attn["s"] = 0.0
        if comm is not None:
            comm.collective_acc = 0.0
        sync()
        t0 = time.perf_counter()
        out = run(runner, fb, hidden)
        sync()
        dt = time.perf_counter() - t0
        key = f"{names.get(id(runner), 'model')}/{fb.forward_mode.name}"
        if getattr(comm, "collective_acc", None) is not None:
            metrics.add_sample(
                "collective_s", "forward/" + ("idle" if fb.forward_mode.is_idle() else "busy"), comm.collective_acc
            )
        if fb.forward_mode.is_idle():
            metrics.add_sample("forward_s_idle", key, dt)
        else:
            metrics.add_sample("forward_s", key, dt)
            metrics.add_sample("attention_s", key, attn["s"])
        return out

    worker.run = timed_run
    metrics.idle_probe = lambda: worker.current.get("forward_mode") == "IDLE"


def instrument_comm(comm: Any, metrics: Metrics) -> None:
    """Time the DP communicator's collectives: per forward (the token-count all_gather plus the MLP
    all_gather / all_reduce with their shard compute, summed by ``instrument``'s forward timer) and
    per scheduling decision (``any_rank``)."""
    comm.collective_acc = 0.0
    begin, mlp, any_rank = comm.begin_forward, comm.mlp, comm.any_rank

    def accumulated(fn: Callable) -> Callable:
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            comm.collective_acc += time.perf_counter() - t0
            return out

        return wrapper

    def timed_any_rank(flag: bool) -> bool:
        t0 = time.perf_counter()
        out = any_rank(flag)
        metrics.add_sample("collective_s", "any_rank", time.perf_counter() - t0)
        return out

    comm.begin_forward, comm.mlp, comm.any_rank = accumulated(begin), accumulated(mlp), timed_any_rank


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
    IDLE forwards are not warmed."""
    from workbench.models.tokenizer import encode

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
