"""Which workbench code produced a figure: the git commit every run record, bench, comparison,
sweep, shipped asset and lane night carries."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def workbench_commit() -> str | None:
    """The workbench's git commit (``<sha>`` or ``<sha>+dirty`` when tracked files differ from it),
    read once per process; None outside a git checkout (an installed wheel)."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("+dirty" if dirty else "")) or None
