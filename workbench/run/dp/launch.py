"""Run a config over ``dp`` rank processes and merge their results into one run record.

A crash on any rank is reported with its traceback and ends every rank; a rank that dies
without a word (a signal) is reported as such; the overall timeout ends everything; what the
ranks streamed before the end (latencies, accept lengths) stays in the record. The ranks run under
the one ``Supervisor`` (each rank its own process group, the run's deadline, SIGTERM then SIGKILL);
this module reads their event streams itself, so it uses the supervisor's start, deadline and end,
not its polling wait.

The ranks' job file and logs live in a ``wb-dp-*`` temporary directory that is removed when the
run ends, however it ends. With a log directory (``log_dir``, or ``$WB_LOG_DIR``) the rank logs are
first copied to ``<log_dir>/<run id>/rank<R>.log`` and the record's ``dp.logs`` names that folder;
without one ``dp.logs`` is None (the crash traceback is in the record either way).
"""

from __future__ import annotations

import json
import os
import queue as queue_mod
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from workbench.debug.bundle import new_bundle_dir
from workbench.run.config import RunConfig
from workbench.run.dp import LOG_DIR_ENV
from workbench.run.dp.collect import Collector
from workbench.run.dp.policy import assign
from workbench.run.events import OnEvent
from workbench.run.record import RankReport, RunRecord
from workbench.run.supervisor import Supervisor

PORT_ATTEMPTS = 3  # launches when the rendezvous port was taken before rank 0 bound it
GRACE_S = 2.0
CAUSE_WINDOW_S = 1.0  # after a first failure, how long to wait for the one that caused it


def free_port() -> int:
    """A free loopback TCP port, chosen now (never a fixed one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pump(stream, q: queue_mod.Queue) -> None:
    for line in stream:
        try:
            q.put(json.loads(line))
        except ValueError:
            continue


def keep_logs(workdir: Path, log_dir: Path | None, dp: int) -> str | None:
    """Copy the rank logs out of ``workdir`` into a fresh folder under ``log_dir``; its path, or None."""
    if log_dir is None:
        return None
    dest = Path(log_dir) / workdir.name.replace("wb-dp-", "dp-", 1)
    dest.mkdir(parents=True, exist_ok=True)
    for r in range(dp):
        if (workdir / f"rank{r}.log").exists():
            shutil.copyfile(workdir / f"rank{r}.log", dest / f"rank{r}.log")
    return str(dest.resolve())


def run_dp(
    cfg: RunConfig, prompts: list[str], log_dir: Path | None = None, on_event: OnEvent | None = None
) -> RunRecord:
    """Returns the merged run record (status ok / crashed / timeout); no temporary file outlives the call.
    ``on_event(kind, rank, payload)`` gets every rank event as it arrives (``workbench.run.events``)."""
    if log_dir is None and os.environ.get(LOG_DIR_ENV):
        log_dir = Path(os.environ[LOG_DIR_ENV])
    workdir = Path(tempfile.mkdtemp(prefix="wb-dp-"))
    try:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            rec = _run_ranks(cfg, prompts, workdir, on_event)
            if not _port_taken(rec) or attempt == PORT_ATTEMPTS:
                break
        rec.dp.port_attempts = attempt
        rec.dp.logs = keep_logs(workdir, log_dir, cfg.dp)
        return rec
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _port_taken(rec: RunRecord) -> bool:
    """Rank 0 could not listen on the chosen port: another process took it between free_port() and
    the bind (a race on a busy machine), not a fault of the run; the launch is retried on a new port."""
    return rec.crash is not None and rec.crash.phase == "setup" and "EADDRINUSE" in rec.crash.message


def _run_ranks(cfg: RunConfig, prompts: list[str], workdir: Path, on_event: OnEvent | None) -> RunRecord:
    t0, started = time.perf_counter(), time.time()
    sup = Supervisor(cfg.timeout_s, grace_s=GRACE_S)
    plan = assign(len(prompts), cfg.dp, cfg.dp_policy, cfg.max_running)
    init = f"tcp://127.0.0.1:{free_port()}"
    job = workdir / "job.json"
    job.write_text(
        json.dumps(
            {
                "config": cfg.to_dict(),
                "prompts": prompts,
                "assignment": plan,
                "collective_timeout_s": min(cfg.timeout_s, 120.0),
                "bundle_dir": str(new_bundle_dir()),
            }
        )
    )
    q: queue_mod.Queue = queue_mod.Queue()
    procs, pumps, logs = [], [], []
    col = Collector(cfg)
    first_crash_at: float | None = None
    status = None
    try:
        for r in range(cfg.dp):
            logs.append(open(workdir / f"rank{r}.log", "w"))
            procs.append(
                sup.start(
                    [sys.executable, "-m", "workbench.run.dp.rank", str(job), str(r), str(cfg.dp), init],
                    stdout=subprocess.PIPE,
                    stderr=logs[-1],
                    text=True,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            )
            pumps.append(threading.Thread(target=_pump, args=(procs[-1].stdout, q), daemon=True))
            pumps[-1].start()
        while len(col.results) < cfg.dp:
            now = time.perf_counter()
            if first_crash_at is not None and now > first_crash_at + CAUSE_WINDOW_S:
                break
            if sup.over():
                status = sup.stop("timeout")
                break
            try:
                kind, rank, payload = q.get(timeout=0.05)
            except queue_mod.Empty:
                for r, (p, pump) in enumerate(zip(procs, pumps, strict=False)):
                    if r not in col.results and p.poll() is not None and not pump.is_alive():
                        col.rank_died(r, p.returncode, workdir / f"rank{r}.log")
                        first_crash_at = first_crash_at or time.perf_counter()
                continue
            if kind == "done":
                payload = RankReport.from_event(payload)
            if on_event is not None:
                on_event(kind, rank, payload)
            if col.feed(kind, rank, payload):
                first_crash_at = first_crash_at or time.perf_counter()
    finally:  # a run that ended well lets its ranks exit for GRACE_S; any other ends them at once
        sup.end(wait_s=0.0 if col.crashes or status == "timeout" or len(col.results) < cfg.dp else GRACE_S)
        for log in logs:
            log.close()
    return col.record(
        prompts,
        time.perf_counter() - t0,
        status,
        {"assignment": plan, "init_method": init, "logs": None},
        started=started,
    )
