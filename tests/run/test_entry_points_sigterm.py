"""SIGTERM to an entry point that starts processes (a module run with ``python -m``, a script) ends what it
started and exits 143, as a ``workbench`` command does: ``exits_on_sigterm``."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

# entry points whose main starts no process (parsing, merging, writing files) need no SIGTERM handling
STARTS_NOTHING = {
    "ci/execute.py",  # the notebook child itself: its parent (ci/nightly.py) supervises it
    "scripts/bench_linear_layout.py",
    "scripts/count_key_lookups.py",
    "scripts/figures.py",
    "scripts/gpu_check.py",
    "scripts/make_runtime_standalone_draft.py",
    "scripts/train_models.py",
    "scripts/train_runtime_eagle_draft.py",
    "scripts/train_runtime_models.py",
    "workbench/cli/flags.py",
    "workbench/run/dp/rank.py",  # a rank: its launcher supervises it
    "workbench/run/dp/torchrun.py",  # a rank under torchrun: its launcher supervises it
    "workbench/upstream/replay/repro_script.py",  # runs in a release's interpreter, started by a supervisor
    "workbench/upstream/runtime/explore.py",  # --merge only
}
# entry points that hold SIGTERM their own way: ci/nightly.py and workbench/cli/__init__.py (sigterm_exits)
OWN_WAY = {"ci/nightly.py", "workbench/cli/__init__.py"}

CHILD = """
import os, subprocess, sys, time
from workbench.run.supervisor import Supervisor, exits_on_sigterm

def main():
    with Supervisor(timeout_s=120) as sup:
        p = sup.start([sys.executable, "-c", "import time; time.sleep(120)"], env=dict(os.environ))
        print(p.pid, flush=True)
        sup.wait()
    return 0

sys.exit(exits_on_sigterm("entry", main))
"""


def test_sigterm_ends_the_supervised_children_and_exits_143(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    cmd = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    child = int(cmd.stdout.readline())  # the child (in a session of its own) is running
    try:
        time.sleep(0.3)
        cmd.send_signal(signal.SIGTERM)
        _, err = cmd.communicate(timeout=60)
        gone = False
        for _ in range(40):
            if not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                gone = True
                break
            time.sleep(0.25)
        assert cmd.returncode == 143 and "entry: terminated (SIGTERM)" in err, (cmd.returncode, err[-2000:])
        assert gone, f"the supervised child {child} outlived the entry point"
    finally:
        if psutil.pid_exists(child):
            psutil.Process(child).kill()


def _main_blocks(path: Path) -> list[str]:
    """The source of each ``if __name__ == "__main__":`` block of a file."""
    text = path.read_text()
    out = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            out.append(ast.get_source_segment(text, node) or "")
    return out


def test_every_entry_point_that_can_start_processes_exits_on_sigterm() -> None:
    files = [p for d in ("workbench", "ci", "scripts") for p in (ROOT / d).rglob("*.py") if "assets" not in p.parts]
    unhandled, stale = [], []
    for path in sorted(files):
        rel = path.relative_to(ROOT).as_posix()
        for block in _main_blocks(path):
            if rel in STARTS_NOTHING or rel in OWN_WAY:
                continue
            if "exits_on_sigterm(" not in block:
                unhandled.append(rel)
    for rel in sorted(STARTS_NOTHING | OWN_WAY):
        if not (ROOT / rel).exists() or not _main_blocks(ROOT / rel):
            stale.append(rel)
    assert unhandled == [], f"entry points without exits_on_sigterm (or list them as starting nothing): {unhandled}"
    assert stale == [], f"listed entry points that no longer exist or have no __main__ block: {stale}"
