"""Launching the replay driver (``wb_driver``) in a release's environment.

The driver is started by ``release_process.run_in_release`` (target ``replay.wb_driver.main``): the
one boot, environment (``TRITON_INTERPRET=1``: the release's Triton kernels run on CPU tensors;
``TMPDIR`` its own temporary folder, removed with it), result file and supervisor, the sources to
replay first on ``sys.path``, and one wall-clock limit (``ctx.timeout_s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..context import UpstreamContext
from ..release_process import run_in_release

TARGET = "replay.wb_driver.main"


@dataclass
class DriverRun:
    """What one driver process gave: its result (None when it wrote none), its output's tail, time."""

    result: dict | None
    stderr: str
    wall_s: float
    timed_out: bool


def run_driver(ctx: UpstreamContext, python: Path, cfg: dict) -> DriverRun:
    """Run the driver under `python` on `cfg` (see `wb_driver.main`); never raises for its failures."""
    paths = [cfg["src_root"]] if cfg.get("src_root") else []
    run = run_in_release(python, TARGET, cfg, ctx.timeout_s, paths=paths, name="replay")
    return DriverRun(run.result, run.output[-2000:], run.wall_s, run.timed_out)
