"""One rank's run: build the worker for a config, schedule the prompts, report tokens and metrics.

Used directly for dp 1 and by each rank process under DP attention (``workbench.run.dp``). What
watches the engine during a run is listed in one place, ``observers``.
"""

from __future__ import annotations

import contextlib
import time

import torch

from workbench.debug.capture import CrashCapture
from workbench.engine.hooks import NO_HOOKS, Hooks, Observer
from workbench.engine.metrics import Metrics
from workbench.engine.schedule_batch import Req
from workbench.engine.scheduler import AnyRank, Scheduler
from workbench.engine.worker import GreedyWorker, WorkerBase
from workbench.models.loader import load_models
from workbench.models.tokenizer import encode
from workbench.run.config import RunConfig
from workbench.run.events import EventSink, EventStream
from workbench.run.faults import FaultInjection
from workbench.run.record import RankReport, crash_from_exception
from workbench.run.timing import Timing, apply_dtype, tensor_device, warm_up
from workbench.speculative.eagle_worker import EagleWorker
from workbench.speculative.revisions import get_revision
from workbench.speculative.spec_config import SpecConfig

MAX_CONTEXT = 512


def build_worker(
    cfg: RunConfig, dp_comm: object | None = None, metrics: Metrics | None = None, hooks: Hooks | None = None
) -> WorkerBase:
    target, draft = load_models(cfg.model_dir)
    kw = {"dp_comm": dp_comm, "metrics": metrics, "hooks": hooks or NO_HOOKS}
    if cfg.mode == "greedy":
        return GreedyWorker(target, cfg.backend, cfg.max_running, MAX_CONTEXT, **kw)
    spec = SpecConfig(
        get_revision(cfg.revision), cfg.steps, cfg.topk, cfg.draft_tokens, cfg.verify_idle_input, cfg.idle_verify
    )
    return EagleWorker(target, draft, cfg.backend, spec, cfg.max_running, MAX_CONTEXT, **kw)


def observers(
    cfg: RunConfig, rank: int, metrics: Metrics, bundle_dir: str | None, events: EventSink | None, dp: bool
) -> list[Observer]:
    """Everything that watches one rank's run, in the order it is called at each hook
    (``workbench.engine.hooks``): timing into ``metrics``; the rank's event stream to its launcher
    (DP ranks); the test hook's fault (``cfg.fault``); crash capture into ``bundle_dir``. During the
    warm-up (``metrics.muted``) timing records nothing, the stream sends no phases or accepts and
    the fault waits."""
    found: list[Observer] = [Timing(metrics, dp=dp)]

    def muted() -> bool:
        return metrics.muted

    if events is not None:
        found.append(EventStream(rank, events, muted))
    if cfg.fault is not None:
        found.append(FaultInjection(cfg.fault, rank, muted))
    found.append(CrashCapture(rank, cfg.dp, cfg.revision, cfg.apply_fix_in_place, bundle_dir))
    return found


def run_rank(
    cfg: RunConfig,
    prompts: list[str],
    prompt_ids: list[int],
    rank: int = 0,
    dp_comm: object | None = None,
    any_rank: AnyRank | None = None,
    events: EventSink | None = None,
    bundle_dir: str | None = None,
) -> RankReport:
    """Run this rank's share of the prompts. Never raises: a failure becomes the report's ``crash``.

    Returns the rank's ``RankReport`` (outputs, metrics, crash, kernel, timings). A forward that
    raises leaves a crash bundle in ``bundle_dir`` (when None, a new folder under
    ``workbench.debug.bundle.bundle_root()``); ``crash.bundle`` gives its path. ``events``: where
    a DP rank streams its forwards, phases and accepts (``workbench.run.events``).
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
            return _run_rank(cfg, prompts, prompt_ids, rank, dp_comm, any_rank, events, bundle_dir)
    finally:
        torch.set_num_threads(threads_before)


def _run_rank(
    cfg: RunConfig,
    prompts: list[str],
    prompt_ids: list[int],
    rank: int,
    dp_comm: object | None,
    any_rank: AnyRank | None,
    events: EventSink | None,
    bundle_dir: str | None,
) -> RankReport:
    metrics = Metrics()
    watching = observers(cfg, rank, metrics, bundle_dir, events, dp=dp_comm is not None)
    capture = next(o for o in watching if isinstance(o, CrashCapture))
    sync = torch.cuda.synchronize if cfg.device == "cuda" else None  # timers wait for the GPU's work
    hooks = Hooks(watching, synchronize=sync)
    if dp_comm is not None:
        dp_comm.hooks = hooks
    out = RankReport(metrics=metrics)
    worker, sched = None, None
    t0 = time.perf_counter()
    gen_t0 = None
    try:
        worker = build_worker(cfg, dp_comm, metrics, hooks)
        apply_dtype(worker, cfg.dtype)
        out.kernel, out.kernel_stand_in = worker.backend.kernel, worker.backend.kernel_is_stand_in
        out.device, out.torch_threads = tensor_device(worker), torch.get_num_threads()
        if cfg.warmup:  # every rank, the same request (timing.warm_up)
            out.warmup_s = warm_up(worker, metrics, Req)
        reqs = [Req(i, encode(prompts[i]), cfg.max_new_tokens) for i in prompt_ids]
        sched = Scheduler(worker, cfg.max_running, any_rank)
        sched.add(reqs)
        gen_t0, out.gen_start = time.perf_counter(), time.time()
        for r in sched.run():
            out.outputs[r.rid] = r.output_ids
        out.slots_free = worker.memory.allocator.available()
        out.slots_capacity = worker.memory.allocator.capacity
    except Exception as e:  # the record carries it; DP callers end the other ranks
        where = dict(worker.current) if worker is not None else {"phase": "setup"}
        out.crash = crash_from_exception(e, rank=rank, where=where, time=time.time(), bundle=capture.path)
        for r in sched.finished if sched is not None else []:  # requests done before the crash stay
            out.outputs[r.rid] = r.output_ids
    end = time.perf_counter()
    out.wall_s = end - t0
    out.setup_s = (gen_t0 if gen_t0 is not None else end) - t0
    if gen_t0 is not None:
        out.generation_s, out.gen_end = end - gen_t0, time.time()
    return out
