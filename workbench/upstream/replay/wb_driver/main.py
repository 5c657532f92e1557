"""Entry point: ``main()`` runs every case of the config at ``sys.argv[1]`` and writes one result to the
config's ``result_path`` (``in_release.result_channel``). Started by ``release_process`` (target
``replay.wb_driver.main``), which sets TRITON_INTERPRET=1 and puts the sources first on ``sys.path``."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback

from ...in_release.result_channel import write
from .case import run_case, sglang_frames
from .graph_runner import run_graph_case
from .setup import setup


def _versions() -> dict:
    import importlib.metadata as md

    import sglang

    out = {
        "python": sys.version.split()[0],
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
        "sglang_path": os.path.dirname(sglang.__file__),
    }
    for name in ("torch", "triton", "transformers", "torchvision"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    with open(sys.argv[1]) as fh:
        cfg = json.load(fh)
    state: dict = {"stage": "start"}
    start = time.perf_counter()
    result: dict = {"env": {}, "cases": []}
    try:
        ctx = setup(cfg, state)
        state["stage"] = "cases"
        for case in cfg.get("cases", []):
            if case.get("graph_runner"):
                result["cases"].append(run_graph_case(ctx, case, state))
            else:
                result["cases"].append(run_case(ctx, case, cfg.get("bundle")))
        state["stage"] = "done"
        result["status"] = "ok"
    except BaseException as exc:  # noqa: BLE001 - the set-up failed: one record says where
        result.update(
            status="error",
            exception=type(exc).__name__,
            message=str(exc),
            traceback="".join(traceback.format_exception(exc))[-4000:],
            frames=sglang_frames(exc.__traceback__),
            missing=getattr(exc, "name", None) if isinstance(exc, ImportError) else None,
        )
    finally:
        for path in state.get("model_dirs", []):
            shutil.rmtree(path, ignore_errors=True)
    result["stage"] = state["stage"]
    result["run_s"] = round(time.perf_counter() - start, 2)
    try:
        result["env"] = _versions()
    except Exception as exc:  # noqa: BLE001
        result["env"] = {"error": repr(exc)}
    write(cfg["result_path"], result)
