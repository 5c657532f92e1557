"""Run a config over ``dp`` rank processes and merge their results into one run record.

A crash on any rank is reported with its traceback and ends every rank; a rank that dies
without a word (a signal) is reported as such; the overall timeout ends everything; what the
ranks streamed before the end (latencies, accept lengths) stays in the record.
"""
from __future__ import annotations

import json
import os
import queue as queue_mod
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from workbench.config import RunConfig
from workbench.dp.policy import assign
from workbench.metrics import Metrics
from workbench.record import build_record

GRACE_S = 2.0
CAUSE_WINDOW_S = 1.0  # after a first failure, how long to wait for the one that caused it


def primary_crash(crashes: List[dict]) -> Optional[dict]:
    """The root cause among the ranks' failures: a rank killed by a signal explains its peers'
    broken collectives, otherwise the first failure reported."""
    died = [c for c in crashes if c["exception_type"] == "RankProcessDied"]
    return (died or crashes or [None])[0]


def free_port() -> int:
    """A free loopback TCP port, chosen now (never a fixed one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_crash(rank: int, exitcode: int, last: Optional[dict], log: Path) -> dict:
    how = f"killed by signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exited with code {exitcode}"
    last = last or {}
    tail = log.read_text()[-4000:] if log.exists() else ""
    return {"rank": rank, "phase": last.get("phase"), "forward_mode": last.get("forward_mode"),
            "batch_size": last.get("batch_size"), "exception_type": "RankProcessDied",
            "message": f"rank {rank} {how} without reporting a result", "traceback": tail or None}


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
    metrics = Metrics(proposed_per_step=cfg.draft_tokens - 1, max_depth=cfg.steps)
    results: Dict[int, dict] = {}
    last_fwd: Dict[int, dict] = {}
    crashes: List[dict] = []  # every rank's failure, in the order seen
    first_crash_at: Optional[float] = None
    status = None
    deadline = t0 + cfg.timeout_s
    try:
        while len(results) < cfg.dp:
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
                    if r not in results and p.poll() is not None and not pump.is_alive():
                        results[r] = {"outputs": {}}
                        crashes.append(_signal_crash(r, p.returncode, last_fwd.get(r), workdir / f"rank{r}.log"))
                        first_crash_at = first_crash_at or time.perf_counter()
                continue
            if kind == "forward":
                last_fwd[rank] = payload
            elif kind == "latency":
                metrics.add_latency(*payload)
            elif kind == "accepts":
                metrics.add_accepts(payload)
            elif kind == "done":
                results[rank] = payload
                if payload.get("crash"):
                    crashes.append(payload["crash"])
                    first_crash_at = first_crash_at or time.perf_counter()
    finally:
        for p in procs:
            if p.poll() is None and (crashes or status == "timeout"):
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    outputs: Dict[int, List[int]] = {}
    for res in results.values():
        outputs.update({int(k): v for k, v in res.get("outputs", {}).items()})
    first = next((r for r in results.values() if r.get("kernel")), {})
    extra = {
        "dp": {"assignment": plan, "init_method": init, "logs": str(workdir), "ranks_reported": sorted(results),
               "last_forward": {str(k): v for k, v in last_fwd.items()}},
        "slots_leaked": sum(r["slots_capacity"] - r["slots_free"] for r in results.values() if "slots_free" in r)
        if len(results) == cfg.dp and not crashes else None,
    }
    crash = primary_crash(crashes)
    extra["dp"]["rank_failures"] = crashes
    if status == "timeout":
        crash = {"rank": None, "phase": None, "forward_mode": None, "batch_size": None, "exception_type": "Timeout",
                 "message": f"run exceeded {cfg.timeout_s} s; last forward per rank: {last_fwd}", "traceback": None}
    return build_record(cfg, prompts, outputs, metrics, time.perf_counter() - t0, crash, first.get("kernel"),
                        first.get("kernel_stand_in"), status=status, extra=extra)
