"""The Makefile's set-up: an unsupported Python stops the build with a message naming the version found
and the supported one (nothing is created); torch comes from a local wheel or PyTorch's CPU index on a
machine without nvidia-smi, from pip's usual indexes on one with it, from TORCH_INDEX when it is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU = "https://download.pytorch.org/whl/cpu"


def _fake_python(tmp_path: Path, version: tuple[int, int, int]) -> Path:
    """An interpreter that reports ``version`` as sys.version_info (the real one runs the code)."""
    fake = tmp_path / "python-fake"
    patch = (
        "import sys, collections; V = collections.namedtuple('V', 'major minor micro releaselevel serial'); "
        f"sys.version_info = V(*{version!r}, 'final', 0); exec(sys.argv[1])"
    )
    fake.write_text(f'#!/bin/sh\n[ "$1" = -c ] || exit 3\nexec {sys.executable} -c "{patch}" "$2"\n')
    fake.chmod(0o755)
    return fake


def _make(*args: str, path: str | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX"}
    if path is not None:
        base["PATH"] = path
    return subprocess.run(["make", *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("version", [(3, 12, 1), (3, 10, 14), (3, 11, 2)])
def test_an_unsupported_python_stops_the_build_naming_both_versions(tmp_path, version):
    venv = tmp_path / "venv"
    res = _make("venv", f"VENV={venv}", f"PY={_fake_python(tmp_path, version)}")
    found = ".".join(map(str, version))
    assert res.returncode != 0 and f"make: Python {found} found" in res.stderr, res.stderr
    assert "supports Python 3.11.5 or a later 3.11" in res.stderr and "PY=python3.11" in res.stderr
    assert not venv.exists(), "the build went on after the version check"


def test_a_supported_python_passes_the_check(tmp_path):
    fake = _fake_python(tmp_path, (3, 11, 9))  # runs -c only: the build stops at the next step, `PY -m venv`
    res = _make("venv", f"VENV={tmp_path / 'venv'}", f"PY={fake}")
    assert "found" not in res.stderr and f"{fake} -m venv" in res.stdout, res.stdout + res.stderr


def test_torch_comes_from_a_local_wheel_or_the_cpu_index_without_a_gpu(tmp_path):
    no_gpu = f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    dry = _make("-n", "venv", f"VENV={tmp_path / 'venv'}", path=no_gpu).stdout
    assert '--no-index --no-deps "torch==2.13.0"' in dry and f"--index-url {CPU} --no-deps" in dry, dry
    gpu = tmp_path / "gpu"
    gpu.mkdir()
    (gpu / "nvidia-smi").write_text("#!/bin/sh\n")
    (gpu / "nvidia-smi").chmod(0o755)
    dry = _make("-n", "venv", f"VENV={tmp_path / 'venv'}", path=f"{gpu}:{no_gpu}").stdout
    assert '--no-index --no-deps "torch==2.13.0"' in dry and "--index-url" not in dry, dry
    chosen = "https://download.pytorch.org/whl/cu128"
    dry = _make("-n", "venv", f"VENV={tmp_path / 'venv'}", path=no_gpu, TORCH_INDEX=chosen).stdout
    assert f"--index-url {chosen} --no-deps" in dry and "--no-index" not in dry, dry
