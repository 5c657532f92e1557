"""Launching the replay driver (``wb_driver``) in a release's replay environment.

The driver runs under the environment's python with ``-I`` (no user site, no PYTHONPATH), this
folder and the sources to replay put on ``sys.path`` by a one-line boot, ``TRITON_INTERPRET=1``
(the release's Triton kernels run on CPU tensors), its config in a JSON file in a temporary
working folder (also its ``TMPDIR``, removed with it), and one wall-clock limit
(``ctx.timeout_s``). It prints one ``WB_RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..context import UpstreamContext

HERE = Path(__file__).resolve().parent
MARK = "WB_RESULT "
BOOT = "import sys; sys.path.insert(0, {here!r}); from wb_driver.main import main; main(sys.argv[1])"


@dataclass
class DriverRun:
    """What one driver process gave: its result (None when it printed none), stderr's tail, time."""

    result: dict | None
    stderr: str
    wall_s: float
    timed_out: bool


def run_driver(ctx: UpstreamContext, python: Path, cfg: dict) -> DriverRun:
    """Run the driver under `python` on `cfg` (see `wb_driver.main`); never raises for its failures."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(TRITON_INTERPRET="1", PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wb-replay-") as cwd:
        env["TMPDIR"] = cwd  # importing sglang makes torch's torchinductor_<user> there, removed with cwd
        cfg_path = Path(cwd) / "cfg.json"
        cfg_path.write_text(json.dumps(cfg))
        cmd = [str(python), "-I", "-c", BOOT.format(here=str(HERE)), str(cfg_path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=ctx.timeout_s)
        except subprocess.TimeoutExpired as exc:
            tail = exc.stderr or ""
            tail = tail.decode("utf-8", "replace") if isinstance(tail, bytes) else tail
            return DriverRun(None, tail[-2000:], time.perf_counter() - start, True)
        except OSError as exc:
            return DriverRun(None, f"could not start {python}: {exc}", time.perf_counter() - start, False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    try:
        result = json.loads(lines[-1][len(MARK) :]) if lines else None
    except ValueError:
        result = None
    return DriverRun(result, proc.stderr[-2000:], time.perf_counter() - start, False)
