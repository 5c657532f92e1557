"""One rank's run: build the worker for a config, schedule the prompts, report tokens and metrics.

Used directly for dp 1 and by each rank process under DP attention (``workbench.run.dp``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch

from workbench.debug.bundle import write_crash_bundle
from workbench.engine.metrics import Metrics
from workbench.engine.schedule_batch import Req
from workbench.engine.scheduler import AnyRank, Scheduler
from workbench.engine.worker import GreedyWorker, WorkerBase
from workbench.models.loader import load_models
from workbench.models.tokenizer import encode
from workbench.run.config import RunConfig
from workbench.run.record import crash_from_exception
from workbench.run.timing import apply_dtype, instrument, instrument_comm, tensor_device, warm_up
from workbench.speculative.eagle_worker import EagleWorker
from workbench.speculative.revisions import get_revision
from workbench.speculative.spec_config import SpecConfig

MAX_CONTEXT = 512


def build_worker(cfg: RunConfig, dp_comm: object | None = None, metrics: Metrics | None = None) -> WorkerBase:
    target, draft = load_models(cfg.model_dir)
    if cfg.mode == "greedy":
        return GreedyWorker(target, cfg.backend, cfg.max_running, MAX_CONTEXT, dp_comm=dp_comm, metrics=metrics)
    spec = SpecConfig(get_revision(cfg.revision), cfg.steps, cfg.topk, cfg.draft_tokens)
    return EagleWorker(target, draft, cfg.backend, spec, cfg.max_running, MAX_CONTEXT, dp_comm=dp_comm, metrics=metrics)


def run_rank(
    cfg: RunConfig,
    prompts: list[str],
    prompt_ids: list[int],
    rank: int = 0,
    dp_comm: object | None = None,
    any_rank: AnyRank | None = None,
    on_start: Callable[[WorkerBase], None] | None = None,
    bundle_dir: str | None = None,
) -> dict:
    """Run this rank's share of the prompts. Never raises: a failure becomes a ``crash`` entry.

    Returns {"outputs": {prompt index: token ids}, "metrics": Metrics, "crash": None | dict,
    "backend": name, "kernel": label, "device": where the tensors are, "wall_s": seconds,
    "setup_s": seconds before the first prefill, "generation_s": first prefill to last token,
    "gen_start" / "gen_end": epoch seconds of both ends (DP merges ranks with them)}. A forward that
    raises leaves a crash bundle in ``bundle_dir`` (when None, a new folder under
    ``workbench.debug.bundle.bundle_root()``); ``crash["bundle"]`` gives its path.
    """
    torch.manual_seed(cfg.seed)
    threads_before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    # cuda: every tensor the engine creates without naming a device goes there (models included);
    # cpu needs no context, and entering one would put a Python hook on every torch call
    placement = torch.device(cfg.device) if cfg.device != "cpu" else contextlib.nullcontext()
    try:
        with placement:
            return _run_rank(cfg, prompts, prompt_ids, rank, dp_comm, any_rank, on_start, bundle_dir)
    finally:
        torch.set_num_threads(threads_before)


def _run_rank(
    cfg: RunConfig,
    prompts: list[str],
    prompt_ids: list[int],
    rank: int,
    dp_comm: object | None,
    any_rank: AnyRank | None,
    on_start: Callable[[WorkerBase], None] | None,
    bundle_dir: str | None,
) -> dict:
    metrics = Metrics()
    out = {
        "outputs": {},
        "metrics": metrics,
        "crash": None,
        "kernel": None,
        "kernel_stand_in": None,
        "warmup_s": None,
        "gen_start": None,
        "gen_end": None,
        "generation_s": None,
    }
    worker, sched = None, None
    t0 = time.perf_counter()
    gen_t0 = None
    try:
        worker = build_worker(cfg, dp_comm, metrics)
        apply_dtype(worker, cfg.dtype)
        instrument(worker, metrics)
        if dp_comm is not None:
            instrument_comm(dp_comm, metrics)
        out["kernel"], out["kernel_stand_in"] = worker.backend.kernel, worker.backend.kernel_is_stand_in
        out["device"], out["torch_threads"] = tensor_device(worker), torch.get_num_threads()
        if on_start is not None:
            on_start(worker)
        if cfg.warmup:  # every rank, the same request (timing.warm_up)
            out["warmup_s"] = warm_up(worker, metrics, Req)
        reqs = [Req(i, encode(prompts[i]), cfg.max_new_tokens) for i in prompt_ids]
        sched = Scheduler(worker, cfg.max_running, any_rank)
        sched.add(reqs)
        gen_t0, out["gen_start"] = time.perf_counter(), time.time()
        for r in sched.run():
            out["outputs"][r.rid] = r.output_ids
        out["slots_free"] = worker.memory.allocator.available()
        out["slots_capacity"] = worker.memory.allocator.capacity
    except Exception as e:  # the record carries it; DP callers end the other ranks
        where = dict(worker.current) if worker is not None else {"phase": "setup"}
        out["crash"] = crash_from_exception(e, rank=rank, where=where, time=time.time())
        write_crash_bundle(out["crash"], worker, cfg, e, bundle_dir)
        for r in sched.finished if sched is not None else []:  # requests done before the crash stay
            out["outputs"][r.rid] = r.output_ids
    end = time.perf_counter()
    out["wall_s"] = end - t0
    out["setup_s"] = (gen_t0 if gen_t0 is not None else end) - t0
    if gen_t0 is not None:
        out["generation_s"], out["gen_end"] = end - gen_t0, time.time()
    return out
