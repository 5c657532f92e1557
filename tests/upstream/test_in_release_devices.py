"""The one device redirect of in-release code (``in_release.devices.CudaToCpu``), on both of its paths:
around a replay's case (a context: torch is put back after) and installed for good by the real
runtime's ``pin-memory-cpu`` and ``cuda-device-factories`` shims (in a process of its own here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.upstream.in_release import shims
from workbench.upstream.in_release.devices import FUNCTIONS, METHODS, CudaToCpu

ROOT = Path(__file__).resolve().parents[2]


def test_a_replay_redirects_only_inside_its_case():
    before = {n: getattr(torch, n) for n in FUNCTIONS} | {f"Tensor.{n}": getattr(torch.Tensor, n) for n in METHODS}
    own = {n for n in METHODS if n in vars(torch.Tensor)}  # methods torch.Tensor defines itself (not inherited)
    with CudaToCpu() as redirect:
        t = torch.zeros(2, device="cuda:0")
        u = torch.tensor([1, 2], pin_memory=True)
        v = u.to("cuda", non_blocking=True)
        w = u.new_zeros(3, device=torch.device("cuda"))
        assert u.cuda() is u and u.pin_memory() is u
    assert [x.device.type for x in (t, u, v, w)] == ["cpu"] * 4
    assert redirect.redirected == {
        "zeros",
        "tensor(pin_memory)",
        "Tensor.to",
        "Tensor.new_zeros",
        "Tensor.cuda",
        "Tensor.pin_memory",
    }
    after = {n: getattr(torch, n) for n in FUNCTIONS} | {f"Tensor.{n}": getattr(torch.Tensor, n) for n in METHODS}
    assert after == before and {n for n in METHODS if n in vars(torch.Tensor)} == own
    with redirect:  # a replay enters it again for the forward step
        assert torch.full((1,), 3, device="cuda").device.type == "cpu"
    assert torch.full is before["full"]


def test_bad_names_are_refused_before_anything_is_wrapped():
    empty = torch.empty
    with pytest.raises(ValueError, match=r"cannot redirect \['torch.no_such_factory'\]"):
        CudaToCpu(("empty", "no_such_factory"))
    assert torch.empty is empty  # nothing was wrapped
    redirect = CudaToCpu(("empty",), ()).install()
    try:
        with pytest.raises(RuntimeError, match="installed already"):
            redirect.install()
    finally:
        redirect.restore()


RUNTIME = """
import json, torch
from workbench.upstream.in_release import shims
originals = {n: getattr(torch, n) for n in ("tensor", "empty", "zeros", "ones", "full", "arange", "empty_like")}
pin_before = torch.Tensor.pin_memory
for shim in shims.SHIMS:
    if shim.name in ("pin-memory-cpu", "cuda-device-factories"):
        shim.install()
t = torch.tensor([1, 2], pin_memory=True)
idle = torch.empty((0, 4), dtype=torch.long, device="cuda")
print(json.dumps({
    "wrapped": sorted(f"torch.{n}" for n, f in originals.items() if getattr(torch, n) is not f)
    + (["torch.Tensor.pin_memory"] if torch.Tensor.pin_memory is not pin_before else []),
    "devices": [t.device.type, idle.device.type, torch.arange(3, device="cuda").device.type],
    "pinned_is_self": torch.Tensor.pin_memory(t) is t,
}))
"""


def test_the_runtime_shims_install_the_same_redirect_for_the_process():
    """With no GPU the two shims wrap exactly the targets they declare, through ``CudaToCpu``; with a GPU
    they install nothing."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", RUNTIME], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    declared = {t for s in shims.SHIMS if s.name in ("pin-memory-cpu", "cuda-device-factories") for t in s.targets}
    if torch.cuda.is_available():
        assert got["wrapped"] == [] and got["devices"] == ["cpu", "cuda", "cuda"]
    else:
        assert set(got["wrapped"]) == declared and "torch.empty_like" not in got["wrapped"]
        assert got["devices"] == ["cpu", "cpu", "cpu"] and got["pinned_is_self"] is True
