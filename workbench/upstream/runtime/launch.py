"""The parent side of the real-runtime lane: rank processes, their deadline, and ending them all.

Each rank is ``rank.py`` on the replay environment's Python, in its own session (process group),
with its log in the run folder. The parent polls the ranks' result files: it stops at the first
crash or error (after a short window in which the other ranks may report what they saw), when
every rank holding requests is done and the idle ranks have reported (or ``IDLE_REPORT_S`` passed),
when a rank exits without a word, or at the deadline. Then
it ends every rank's process group (SIGTERM, then SIGKILL) and waits for them: upstream's own
launcher hangs when a DP rank dies (its peers block in a collective), this one never does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RANK_SCRIPT = HERE / "rank.py"
CAUSE_WINDOW_S = 3.0  # after a first failure, how long the other ranks may still report theirs
GRACE_S = 3.0
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
    """What the ranks left: their result dicts by rank, how the wait ended, and the timings."""

    results: dict = field(default_factory=dict)
    ended_by: str = ""  # done | crashed | error | exited | timeout
    exit_codes: dict = field(default_factory=dict)
    wall_s: float = 0.0
    left_running: list = field(default_factory=list)  # pids still alive after the kill (should be empty)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _end(procs: list[subprocess.Popen]) -> list[int]:
    """SIGTERM every rank's process group, SIGKILL what is left after GRACE_S; the pids still alive."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    alive = [p.pid for p in procs]
    deadline = time.monotonic() + GRACE_S  # children of a killed rank leave its group a moment later
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _group_alive(pid)]
        time.sleep(POLL_S)
    return alive


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def run_ranks(python: Path, configs: list[dict], run_dir: Path, env: dict, timeout_s: float) -> RankRun:
    """Start one ``rank.py`` per config and wait as the module docstring says; never leaves a process."""
    t0 = time.monotonic()
    out = RankRun()
    busy = {c["rank"] for c in configs if c["requests"]}
    paths = {c["rank"]: Path(c["result_path"]) for c in configs}
    procs: list[subprocess.Popen] = []
    first_failure: float | None = None
    done_at: float | None = None
    try:
        for c in configs:
            cfg_path = run_dir / f"rank{c['rank']}.json"
            cfg_path.write_text(json.dumps(c))
            with open(run_dir / f"rank{c['rank']}.log", "w") as log:
                procs.append(
                    subprocess.Popen(
                        [str(python), str(RANK_SCRIPT), str(cfg_path)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                        cwd=run_dir,
                        start_new_session=True,
                    )
                )
        while True:
            now = time.monotonic()
            for r, path in paths.items():  # re-read every time: an idle rank writes only if it fails
                res = _read(path)
                if res is not None:
                    out.results[r] = res
                    if res["status"] != "done" and first_failure is None:
                        first_failure, out.ended_by = now, res["status"]
            if first_failure is not None:
                failed = [r for r, res in out.results.items() if res["status"] != "done"]
                if now > first_failure + CAUSE_WINDOW_S or len(failed) == len(paths):
                    break
            elif all(out.results.get(r, {}).get("status") == "done" for r in busy):
                done_at = done_at or now  # the idle ranks report after the busy ones (their guard after the run)
                if len(out.results) == len(paths) or now > done_at + IDLE_REPORT_S:
                    out.ended_by = "done"
                    break
            for p, c in zip(procs, configs, strict=True):
                if p.poll() is not None and first_failure is None:
                    time.sleep(POLL_S)  # a rank writes its result just before exiting
                    if _read(paths[c["rank"]]) is None:
                        out.ended_by, first_failure = "exited", now
            if now - t0 > timeout_s:
                out.ended_by = out.ended_by or "timeout"
                break
            time.sleep(POLL_S)
    finally:
        out.left_running = _end(procs)
        out.exit_codes = {c["rank"]: p.returncode for p, c in zip(procs, configs, strict=True)}
        out.wall_s = round(time.monotonic() - t0, 2)
    return out
