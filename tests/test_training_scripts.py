"""The scripts that train what the workbench ships still run: ``train_runtime_models.py --quick``
end to end (its models written and loadable as safetensors with their configs), ``train_models.py``
as far as its argument parser and its kernel pins. A moved import fails here, not on the day someone retrains.

The quick run here trains on small batches (``SMALL``: 2 windows of 64 bytes, not 16 of 256): the same
code, steps and models at a 32nd of the compute (about 20 CPU-s less on the 2-core box)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--batch", "2", "--seq", "64"]


def test_train_runtime_models_quick_run_writes_both_models(tmp_path):
    out = tmp_path / "models"
    tmp = tmp_path / "tmp"  # a torch optimizer, once built, makes torchinductor_<user> in TMPDIR
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, "scripts/train_runtime_models.py", "--quick", *SMALL, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for role in ("target", "draft"):
        config = json.loads((out / role / "config.json").read_text())
        weights = load_file(str(out / role / "model.safetensors"))
        assert config["hidden_size"] == 128 and weights, role
    meta = json.loads((out / "TRAINING.json").read_text())
    assert meta["target"]["steps"] == 10 and meta["head_steps"] == 10
    assert (meta["batch"], meta["seq"]) == (2, 64)  # the small shapes were taken
    assert 0 < meta["target_heldout_bits_per_byte"] < 9  # bytes: 8 bits is a uniform guess


def test_train_models_parses_its_arguments():
    proc = subprocess.run(
        [sys.executable, "scripts/train_models.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "--quick" in proc.stdout, proc.stderr[-2000:]


def test_train_models_pins_the_kernels_before_torch_loads():
    """Importing ``train_models.py`` sets ``PINNED`` in the environment, and torch then dispatches to the
    AVX2 kernels, as a bare torch started with ``ATEN_CPU_CAPABILITY=avx2`` does (without the pins this
    box's torch runs its AVX-512 kernels, and the weights come out other bytes)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "MKL_DYNAMIC", "ATEN_CPU_CAPABILITY")}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    show = "import os, torch; print(torch.backends.cpu.get_cpu_capability(), os.environ.get('MKL_CBWR'))"

    def run(code: str, extra: dict[str, str]) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env={**env, **extra}
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.split()

    got = run("import scripts.train_models; " + show, {})
    assert got == run(show, {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"})
    assert got[1] == "AVX2,STRICT"
