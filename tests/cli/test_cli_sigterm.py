"""SIGTERM to a ``workbench`` command (a cancelled CI job, a machine shutting down) ends what it started:
a DP run's rank processes (each in a session of its own) are gone, the command exits 143 (128 + SIGTERM)
and nothing is left in its temp dir."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def _marked(mark: str, but: int) -> list[psutil.Process]:
    """Live processes other than ``but`` whose environment holds WB_TEST_MARK=mark."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != but and p.status() != psutil.STATUS_ZOMBIE and p.environ().get("WB_TEST_MARK") == mark:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_sigterm_ends_a_dp_runs_ranks_and_exits_143(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "WB_TEST_MARK": mark}
    # two short prompts (one a rank), 400 new tokens each in the Triton interpreter: minutes of work, inside the context
    argv = ["run", "--dp", "2", "--backend", "triton", "--prompts", "def f(x):", "def g(y):"]
    argv += ["--max-new-tokens", "400"]
    cmd = subprocess.Popen(
        [sys.executable, "-m", "workbench", *argv],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    ranks: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and cmd.poll() is None:
            ranks = _marked(mark, cmd.pid)
            if len(ranks) >= 2:
                break
            time.sleep(0.5)
        assert len(ranks) >= 2 and cmd.poll() is None, (len(ranks), cmd.poll())
        time.sleep(2)  # the ranks are under way, not starting
        cmd.send_signal(signal.SIGTERM)
        out, _ = cmd.communicate(timeout=120)
        survivors = []
        for _ in range(20):  # a rank ended by the command may take a moment to be reaped
            survivors = _marked(mark, cmd.pid)
            if not survivors:
                break
            time.sleep(0.5)
        assert cmd.returncode == 143 and "workbench run: terminated (SIGTERM)" in out, out[-3000:]
        assert survivors == [], [p.cmdline() for p in survivors]
        assert list(tmp_path.iterdir()) == []
    finally:
        for p in _marked(mark, -1):
            p.kill()
