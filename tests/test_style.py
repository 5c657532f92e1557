"""The house style is pinned: ``ruff check`` and ``ruff format --check`` pass on the whole tree with
the configuration in ``pyproject.toml`` (one line length, PEP 604/585 annotations, sorted imports)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str:
    exe = Path(sys.executable).with_name("ruff")
    found = str(exe) if exe.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed (it is in the dev extra): the style check cannot run")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_passes(args):
    res = subprocess.run([_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "checked" in res.stdout or "formatted" in res.stdout or "All checks passed" in res.stdout
