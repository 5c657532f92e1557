"""Entry point: ``main(cfg_path)`` runs every case of the config and prints one line
``WB_RESULT {json}``. TRITON_INTERPRET=1 must be set by the caller (the host's ``replay.driver``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback

MARK = "WB_RESULT "


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


def main(cfg_path: str) -> None:
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    if cfg.get("src_root"):
        sys.path.insert(0, cfg["src_root"])
    # after the release's sources go first on sys.path (case and setup import sglang)
    from .case import run_case, sglang_frames
    from .setup import setup

    state: dict = {"stage": "start"}
    start = time.perf_counter()
    result: dict = {"env": {}, "cases": []}
    try:
        ctx = setup(cfg, state)
        state["stage"] = "cases"
        for case in cfg.get("cases", []):
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
    sys.stdout.flush()
    print(MARK + json.dumps(result, default=str), flush=True)
