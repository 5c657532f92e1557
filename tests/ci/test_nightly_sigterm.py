"""SIGTERM to the nightly runner (a CI job cancelled, a machine shutting down) ends what it started:
the papermill process of each running notebook, its kernel and the processes the kernel started in
sessions of their own (a DP run's ranks: here a stand-in started as the DP launcher starts them), and
the runner exits 143 (128 + SIGTERM) leaving nothing in its temp dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
STAND_IN = "wb-fixture-rank-stand-in"  # the fixture's rank stand-in carries this in its command line


def _marked(mark: str) -> list[psutil.Process]:
    """Live processes whose environment holds WB_TEST_MARK=mark (every process the runner started inherits it)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("WB_TEST_MARK") == mark:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _kill(procs: list[psutil.Process]) -> None:
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def test_sigterm_ends_the_notebooks_kernels_and_ranks_and_leaves_nothing_in_the_temp_dir(tmp_path: Path) -> None:
    tmp, out, mark = tmp_path / "tmp", tmp_path / "out", uuid.uuid4().hex
    tmp.mkdir()
    cell = {"name": "spawns", "notebook": str(FIXTURES / "fixture_spawn.ipynb"), "parameters": {}, "expect": "ok"}
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"timeouts": {"cell_s": 300, "notebook_s": 600, "start_s": 60}, "cells": [cell]}))
    env = {**os.environ, "TMPDIR": str(tmp), "WB_TEST_MARK": mark}
    runner = subprocess.Popen(
        [sys.executable, "-m", "workbench_ci.nightly", "--matrix", str(matrix), "--out", str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, seen = time.monotonic() + 180, []
        while time.monotonic() < deadline and runner.poll() is None:
            seen = psutil.Process(runner.pid).children(recursive=True)
            if any(STAND_IN in " ".join(p.cmdline()) for p in seen if p.is_running()):
                break
            time.sleep(0.5)
        names = sorted(" ".join(p.cmdline()[1:])[:120] for p in seen if p.is_running())
        assert runner.poll() is None and any(STAND_IN in n for n in names), (
            f"the fixture's rank stand-in never started; the runner's processes: {names}"
        )
        assert any("workbench_ci.execute" in n for n in names) and any("ipykernel" in n for n in names), names
        runner.send_signal(signal.SIGTERM)
        output, _ = runner.communicate(timeout=60)
        assert runner.returncode == 128 + signal.SIGTERM, output[-3000:]
        assert "terminated (SIGTERM)" in output, output[-3000:]
        left = _marked(mark)
        deadline = time.monotonic() + 10  # an orphan's reaper may take a moment
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _marked(mark)
        assert left == [], f"processes outlived the runner: {[(p.pid, p.cmdline()) for p in left]}"
        assert sorted(p.name for p in tmp.iterdir()) == [], "the runner left files in its temp dir"
        assert not list((out / "jobs").glob("*.tmp")), "the notebook's own temp folder was left"
        assert not (out / "report.html").exists(), "a stopped run wrote a report"
    finally:
        runner.kill()
        runner.wait()
        _kill(_marked(mark))
