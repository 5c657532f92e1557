"""One DP rank process: join the group, run the rank, stream events to the parent.

Started by ``workbench.run.dp.launch`` as ``python -m workbench.run.dp.rank JOB RANK WORLD INIT``; every
event is one JSON line on stdout: ``[kind, rank, payload]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import workbench_kernels
from workbench.run.config import RunConfig
from workbench.run.dp.comm import DPCommunicator
from workbench.run.rank_run import run_rank
from workbench.run.record import RankReport, crash_from_exception
from workbench.speculative.eagle_draft_extend_pr28221 import fix_applied


class Emitter:
    """Writes events as JSON lines to the stream the parent reads."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def put(self, event) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()


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
    """Entry point of a spawned rank (and of ``workbench.run.dp.torchrun``); a crash bundle goes to
    ``bundle_dir``. The rank's fix state is the run's (``apply_fix_in_place`` in its config)."""
    workbench_kernels.setup()  # this process's entry: the rank's Triton kernels run in the interpreter (CPU tensors)
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
        queue.put(("done", rank, RankReport(crash=crash).to_event()))
        return
    comm = DPCommunicator(rank, world)
    with fix_applied() if cfg.apply_fix_in_place else contextlib.nullcontext():
        res = run_rank(
            cfg, prompts, ids, rank, comm, lambda flag: comm.any_rank(flag), events=queue, bundle_dir=bundle_dir
        )
    m = res.metrics  # phase latencies and accepts were streamed; the other samples go with the report
    res.samples, res.accepts = m.export_samples(), list(m.accept_length_per_step)
    queue.put(("done", rank, res.to_event()))
    if res.crash is None:
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
