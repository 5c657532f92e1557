"""Which workbench code produced a figure: the one function (``workbench_commit``) that names the git
commit every run record, bench, comparison, sweep, reproducer, shipped asset, runtime run, exploration,
lane night and nightly carries."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def workbench_commit() -> str | None:
    """The workbench's git commit (``<sha>``, or ``<sha>+dirty`` when tracked code differs from it; the
    shipped measurements under ``workbench/assets`` being rewritten do not count), read once per
    process; None outside a git checkout (an installed wheel)."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!workbench/assets"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (sha + ("+dirty" if dirty else "")) or None
