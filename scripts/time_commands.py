"""Times the quick start's commands and records them in ``workbench/assets/command_times.json`` (one
entry per command name, replaced when timed again), which ``docs/figures.md`` and the README's quick
start show.

    python scripts/time_commands.py "make report" ["make test" ...]
    python scripts/time_commands.py "make report" --venv DIR   # the venv's python runs the target

Each name is run as ``make -o STAMP [VENV=DIR] TARGET`` (the venv is built first and not counted:
``make venv`` is its own line), or as the command itself for ``workbench --help`` and
``CI=true bash .ci/run``. The file is written once, after the last command (each command runs on the tree
as committed). Records the wall time, the exit code, the commit (refused on a dirty tree:
the time belongs to a commit), the load average before and after and the core count. Exit codes: 0
every command exited 0, 1 one did not (still recorded), 2 a usage error.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "workbench" / "assets" / "command_times.json"
NAMES = ("make report", "make test", "make bench", "make venv", "workbench --help", "CI=true bash .ci/run")


def argv_of(name: str, venv: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) that run the quick start's command `name` in this checkout."""
    if name == "workbench --help":
        return [str(venv / "bin" / "workbench"), "--help"], {}
    if name == "CI=true bash .ci/run":
        return ["bash", ".ci/run"], {"CI": "true"}
    target = name.split()[1]
    keep = [] if target == "venv" else ["-o", str(venv / ".installed")]
    return ["make", *keep, f"VENV={venv}", target], {}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def time_one(name: str, venv: Path) -> dict:
    """One timed run of `name`: its wall seconds, exit code and the box it ran on."""
    argv, env = argv_of(name, venv)
    commit = _git("rev-parse", "--short=7", "HEAD")  # the code that runs, taken before it runs
    load0, t0 = os.getloadavg(), time.perf_counter()
    code = subprocess.run(argv, cwd=ROOT, env={**os.environ, **env}).returncode
    wall = time.perf_counter() - t0
    return {
        "command": name,
        "ran": " ".join([*(f"{k}={v}" for k, v in env.items()), *argv]),
        "wall_s": round(wall, 1),
        "exit": code,
        "commit": commit,
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "load_before": round(load0[0], 1),
        "load_after": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", choices=NAMES, metavar="NAME", help=f"one of: {', '.join(NAMES)}")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv", help="the built venv (default .venv)")
    args = ap.parse_args(argv)
    if _git("status", "--porcelain", "--untracked-files=no"):
        print("the tree has uncommitted changes: commit first, a time belongs to a commit", file=sys.stderr)
        return 2
    doc = json.loads(OUT.read_text()) if OUT.exists() else {"times": {}}
    worst = 0
    # written once every command has run: a command timed after another must find the tree as committed (the
    # test suite checks the shipped times against docs/figures.md)
    for name in args.names:
        entry = time_one(name, args.venv.resolve())
        doc["times"][name] = entry
        print(f"[time] {name}: {entry['wall_s']} s, exit {entry['exit']}", flush=True)
        worst = max(worst, 1 if entry["exit"] else 0)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return worst


if __name__ == "__main__":
    from workbench.run.supervisor import exits_on_sigterm

    sys.exit(exits_on_sigterm("scripts/time_commands.py", main))
