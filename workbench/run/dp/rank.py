"""One DP rank process: join the group, run the rank, stream events to the parent.

Started by ``workbench.run.dp.launch`` as ``python -m workbench.run.dp.rank JOB RANK WORLD INIT``; every
event is one JSON line on stdout: ``[kind, rank, payload]``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

from workbench.run.config import RunConfig
from workbench.run.record import crash_from_exception


class Emitter:
    """Writes events as JSON lines to the stream the parent reads."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def put(self, event) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()


class _FaultyRunner:
    """A model runner whose forward fails as the test hook asks, inside the worker's ``run`` (so the
    crash record knows the forward mode and batch size, as for a real failure)."""

    def __init__(self, kind: str, rank: int, hook: str) -> None:
        self.kind, self.rank, self.hook = kind, rank, hook

    def forward(self, fb, hidden=None):
        if self.kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"fault injected on rank {self.rank} (test hook {self.hook})")


def _hooks(cfg: RunConfig, rank: int, queue):
    """Stream (phase, mode, bs) of every forward and metrics as they happen; inject test faults."""

    def on_start(worker) -> None:
        run, add_latency, add_accepts = worker.run, worker.metrics.add_latency, worker.metrics.add_accepts
        fault = None
        if cfg.fault is not None:
            kind, _, r = cfg.fault.partition("@rank")
            fault = kind if int(r) == rank else None

        def traced_run(runner, fb, hidden=None):
            nonlocal fault
            queue.put(
                (
                    "forward",
                    rank,
                    {
                        "phase": worker.current.get("phase"),
                        "forward_mode": fb.forward_mode.name,
                        "batch_size": fb.batch_size,
                    },
                )
            )
            if fault is not None and worker.current.get("phase") == "verify" and not worker.metrics.muted:
                runner, fault = _FaultyRunner(fault, rank, cfg.fault), None
            return run(runner, fb, hidden)

        def latency(phase, s, idle=None):
            if worker.metrics.muted:
                return
            idle = bool(worker.metrics.idle_probe and worker.metrics.idle_probe()) if idle is None else idle
            queue.put(("latency", rank, (phase, s, idle)))
            add_latency(phase, s, idle)

        def accepts(a):
            if not worker.metrics.muted:
                queue.put(("accepts", rank, list(a)))
            add_accepts(a)

        worker.run, worker.metrics.add_latency, worker.metrics.add_accepts = traced_run, latency, accepts

    return on_start


def rank_main(
    rank: int,
    world: int,
    init_method: str,
    cfg_dict: dict,
    prompts: list[str],
    ids: list[int],
    queue,
    collective_timeout_s: float,
    bundle_dir: str | None = None,
) -> None:
    """Entry point of a spawned rank (and of ``workbench.run.dp.torchrun``); a crash bundle goes to ``bundle_dir``."""
    import torch
    import torch.distributed as dist

    import kernels
    from workbench.run.dp.comm import DPCommunicator
    from workbench.run.runner import run_rank
    from workbench.speculative.eagle_draft_extend_pr28221 import apply_fix

    kernels.setup()
    cfg = RunConfig(**cfg_dict)
    torch.set_num_threads(cfg.threads or max(1, (os.cpu_count() or 1) // world))  # ranks share the cores
    try:
        dist.init_process_group(
            "gloo",
            init_method=init_method,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=collective_timeout_s),
        )
    except Exception as e:
        crash = crash_from_exception(e, rank=rank, where={"phase": "setup"}, time=time.time())
        queue.put(("done", rank, {"crash": crash, "outputs": {}}))
        return
    if cfg.apply_fix_in_place:
        apply_fix()
    comm = DPCommunicator(rank, world)
    res = run_rank(
        cfg,
        prompts,
        ids,
        rank,
        comm,
        lambda flag: comm.any_rank(flag),
        on_start=_hooks(cfg, rank, queue),
        bundle_dir=bundle_dir,
    )
    m = res.pop("metrics")  # phase latencies and accepts were streamed; the other samples go with the result
    res["samples"], res["accepts"] = m.export_samples(), list(m.accept_length_per_step)
    queue.put(("done", rank, res))
    if res["crash"] is None:
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    job_path, rank, world, init_method = argv
    job = json.loads(Path(job_path).read_text())
    out = Emitter(os.fdopen(os.dup(sys.stdout.fileno()), "w"))
    sys.stdout = sys.stderr  # keep stray prints off the event stream
    rank_main(
        int(rank),
        int(world),
        init_method,
        job["config"],
        job["prompts"],
        job["assignment"][int(rank)],
        out,
        job["collective_timeout_s"],
        bundle_dir=job.get("bundle_dir"),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
