"""Run a config over ``dp`` rank processes and merge their results into one run record.

A crash on any rank is reported with its traceback and ends every rank; a rank that dies
without a word (a signal) is reported as such; the overall timeout ends everything; what the
ranks streamed before the end (latencies, accept lengths) stays in the record.
"""
from __future__ import annotations

import json
import os
import queue as queue_mod
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

from workbench.config import RunConfig
from workbench.dp.policy import assign
from workbench.dp.collect import Collector

GRACE_S = 2.0
CAUSE_WINDOW_S = 1.0  # after a first failure, how long to wait for the one that caused it
# called with every rank event (kind, rank, payload) as it arrives, e.g. by workbench.display.progress
listeners: List[Callable[[str, int, Any], None]] = []


def free_port() -> int:
    """A free loopback TCP port, chosen now (never a fixed one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pump(stream, q: "queue_mod.Queue") -> None:
    for line in stream:
        try:
            q.put(json.loads(line))
        except ValueError:
            continue


def run_dp(cfg: RunConfig, prompts: List[str]) -> dict:
    """Returns the merged run record (status ok / crashed / timeout)."""
    t0 = time.perf_counter()
    plan = assign(len(prompts), cfg.dp, cfg.dp_policy, cfg.max_running)
    init = f"tcp://127.0.0.1:{free_port()}"
    workdir = Path(tempfile.mkdtemp(prefix="wb-dp-"))
    job = workdir / "job.json"
    job.write_text(json.dumps({"config": cfg.to_dict(), "prompts": prompts, "assignment": plan,
                               "collective_timeout_s": min(cfg.timeout_s, 120.0)}))
    q: "queue_mod.Queue" = queue_mod.Queue()
    procs, pumps, logs = [], [], []
    for r in range(cfg.dp):
        log = open(workdir / f"rank{r}.log", "w")
        p = subprocess.Popen([sys.executable, "-m", "workbench.dp.rank", str(job), str(r), str(cfg.dp), init],
                             stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        pump = threading.Thread(target=_pump, args=(p.stdout, q), daemon=True)
        pump.start()
        pumps.append(pump)
        procs.append(p)
        logs.append(log)
    col = Collector(cfg)
    first_crash_at: Optional[float] = None
    status = None
    deadline = t0 + cfg.timeout_s
    try:
        while len(col.results) < cfg.dp:
            now = time.perf_counter()
            if first_crash_at is not None and now > first_crash_at + CAUSE_WINDOW_S:
                break
            if now > deadline:
                status = "timeout"
                break
            try:
                kind, rank, payload = q.get(timeout=0.05)
            except queue_mod.Empty:
                for r, (p, pump) in enumerate(zip(procs, pumps)):
                    if r not in col.results and p.poll() is not None and not pump.is_alive():
                        col.rank_died(r, p.returncode, workdir / f"rank{r}.log")
                        first_crash_at = first_crash_at or time.perf_counter()
                continue
            for listener in listeners:
                listener(kind, rank, payload)
            if col.feed(kind, rank, payload):
                first_crash_at = first_crash_at or time.perf_counter()
    finally:
        for p in procs:
            if p.poll() is None and (col.crashes or status == "timeout"):
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    return col.record(prompts, time.perf_counter() - t0, status,
                      {"assignment": plan, "init_method": init, "logs": str(workdir)})
