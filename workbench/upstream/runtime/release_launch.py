"""The parent side of the real runtime: rank processes, their deadline, and ending them all.

Each rank is ``release_rank.py`` on the release environment's Python, started by ``release_process`` (the one
boot, result file per rank) under one ``Supervisor`` (each rank its own process group), with its log
in the run folder. The parent polls the ranks' result files: it stops at the first
crash or error (after a short window in which the other ranks may report what they saw), when
every rank holding requests is done and the idle ranks have reported (or ``IDLE_REPORT_S`` passed),
when a rank exits without a word, or at the deadline. Then
the supervisor ends every rank's process group (SIGTERM, then SIGKILL) and waits for them:
upstream's own launcher hangs when a DP rank dies (its peers block in a collective), this one never
does.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench.run.supervisor import Supervisor

from ..release_process import read_result, start_in_release
from .rank_result import RankResult, read_rank_result

TARGET = "runtime.release_rank"
CAUSE_WINDOW_S = 3.0  # after a first failure, how long the other ranks may still report theirs
IDLE_REPORT_S = 30.0  # after the busy ranks are done, how long the idle ranks have to report
POLL_S = 0.1


def free_port() -> int:
    """A free loopback TCP port, chosen now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_binding(dp: int) -> str:
    """SGLANG_CPU_OMP_THREADS_BIND for ``dp`` ranks: the cores split evenly (SGLang's own setting; its
    default binds one NUMA node per TP rank and refuses tp > nodes)."""
    cores = os.cpu_count() or 1
    per = max(1, cores // dp)
    return "|".join(
        f"{r * per % cores}-{min(cores, r * per % cores + per) - 1}" if per > 1 else str(r % cores) for r in range(dp)
    )


@dataclass
class RankRun:
    """What the ranks left: their reports by rank, how the wait ended, and the timings."""

    results: dict[int, RankResult] = field(default_factory=dict)
    ended_by: str = ""  # ok | crashed | error (a rank's status) | exited | timeout
    exit_codes: dict = field(default_factory=dict)
    wall_s: float = 0.0
    left_running: list = field(default_factory=list)  # pids still alive after the kill (should be empty)


class _Watch:
    """The supervisor's watch over the ranks' result files: the cause the wait ends by, or None."""

    def __init__(self, configs: list[dict], procs: list, out: RankRun) -> None:
        self.configs, self.procs, self.out = configs, procs, out
        self.busy = {c["rank"] for c in configs if c["requests"]}
        self.paths = {c["rank"]: Path(c["result_path"]) for c in configs}
        self.first_failure: float | None = None
        self.done_at: float | None = None

    def __call__(self) -> str | None:
        now, out = time.monotonic(), self.out
        for r, path in self.paths.items():  # re-read every time: an idle rank writes only if it fails
            got = read_result(path)
            if got is not None:
                res = out.results[r] = read_rank_result(got, r)
                if res.status != "ok" and self.first_failure is None:
                    self.first_failure, out.ended_by = now, res.status
        if self.first_failure is not None:
            failed = [r for r, res in out.results.items() if res.status != "ok"]
            if now > self.first_failure + CAUSE_WINDOW_S or len(failed) == len(self.paths):
                return out.ended_by
        elif all(r in out.results and out.results[r].status == "ok" for r in self.busy):
            self.done_at = self.done_at or now  # the idle ranks report after the busy ones (their guard after the run)
            if len(out.results) == len(self.paths) or now > self.done_at + IDLE_REPORT_S:
                out.ended_by = "ok"
                return "ok"
        for p, c in zip(self.procs, self.configs, strict=True):
            if p.poll() is not None and self.first_failure is None:
                time.sleep(POLL_S)  # a rank writes its result just before exiting
                if read_result(self.paths[c["rank"]]) is None:
                    out.ended_by, self.first_failure = "exited", now
        return None


def run_ranks(python: Path, configs: list[dict], run_dir: Path, env: dict, timeout_s: float) -> RankRun:
    """Start one ``release_rank.py`` per config and wait as the module docstring says; never leaves a process."""
    out = RankRun()
    sup = Supervisor(timeout_s)
    procs: list = []
    try:
        for c in configs:
            cfg_path = run_dir / f"rank{c['rank']}.json"
            cfg_path.write_text(json.dumps(c))
            log = run_dir / f"rank{c['rank']}.log"
            procs.append(
                start_in_release(sup, python, TARGET, cfg_path, env, log, [c["src_root"]] if "src_root" in c else [])
            )
        watch = _Watch(configs, procs, out)
        cause = sup.wait(watch, POLL_S)
        if cause == "exited":  # every rank exited: what they wrote last, then why
            watch()
        out.ended_by = out.ended_by or {"deadline": "timeout"}.get(cause, "exited")
    finally:
        out.left_running = sup.end()
        out.exit_codes = {c["rank"]: p.returncode for p, c in zip(procs, configs, strict=False)}
        out.wall_s = sup.ended().wall_s
    return out
