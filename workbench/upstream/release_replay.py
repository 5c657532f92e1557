"""Upstream replay: the kv_indptr crash on the real sglang code of one release, on CPU."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from packaging.version import Version

from workbench.run.record import crash_record

from .env import EnvBuildError, ensure_env
from .releases import Log, ReleaseError, check_version, default_cache_dir, echo, known_releases
from .triage import run_driver as _run_driver

SUPPORTED_BACKENDS = ("triton",)
KERNEL = "real sglang TritonAttnBackend (triton interpreter, CPU)"
BATCH_SIZE, NUM_TOKENS = 2, 2
BATCH = f"IDLE padded bs={BATCH_SIZE}"
LAST_DRIVEN = "0.5.14"  # the newest release this harness drives end to end


def _record(version: str, backend: str) -> dict:
    return {
        "status": "error",
        "config": {
            "sglang": version,
            "backend": backend,
            "kernel": KERNEL,
            "batch": BATCH,
            "phase": "draft-extend",
            "forward_mode": "IDLE",
            "dp_attention_padding": True,
        },
        "crash": None,
        "error": None,
        "metrics": {},
        "timings": {"install_s": 0.0, "run_s": 0.0, "cached": False},
        "env": {
            "host_python": sys.version.split()[0],
            "platform": platform.platform(),
            "device": "cpu",
            "interpreter": "TRITON_INTERPRET=1",
        },
        "notes": [],
    }


def _fail(rec: dict, stage: str, message: str, missing: str | None = None) -> dict:
    rec["status"] = "error"
    rec["error"] = {"stage": stage, "missing": missing, "message": message}
    return rec


def _raised_at(frames: list[dict]) -> dict | None:
    """The innermost frame inside sglang, with its path relative to the package root."""
    for frame in reversed(frames):
        marker = f"{os.sep}sglang{os.sep}"
        if marker in frame["file"]:
            rel = "sglang" + os.sep + frame["file"].split(marker, 1)[1]
            return {**frame, "file": rel}
    return frames[-1] if frames else None


def run_driver(
    python: Path, timeout_s: float = 900, src_root: Path | None = None, extra: dict | None = None
) -> tuple[dict | None, str, float, bool]:
    """Run driver.py under `python` (TRITON_INTERPRET=1) with `src_root` first on the path.

    Returns (the driver's result or None, stderr tail, wall seconds, timed out).
    """
    cfg = {
        "batch_size": BATCH_SIZE,
        "num_tokens": NUM_TOKENS,
        "src_root": str(src_root) if src_root else None,
        **(extra or {}),
    }
    return _run_driver(python, cfg, timeout_s)


def _fill_from_result(rec: dict, result: dict, tag: str, log: Log) -> None:
    venv_env = dict(result.get("env", {}))
    rec["env"].update(python=venv_env.pop("python", None), TRITON_INTERPRET=venv_env.pop("TRITON_INTERPRET", None))
    rec["env"]["packages"] = {**rec["env"].get("packages", {}), **venv_env}
    rec["timings"]["driver_s"] = result.get("run_s")
    rec["metrics"]["padded_batch"] = result.get("batch")
    run = f"({rec['timings']['run_s']:.1f} s run, {'cached' if rec['timings']['cached'] else 'fresh'} venv)"
    if result["status"] == "ok":
        rec["status"] = "ok"
        rec["metrics"].update(result["metrics"])
        if (result.get("batch") or {}).get("spec_info_kv_indptr_is_none"):
            rec["notes"].append(
                "idle EagleDraftExtendInput.kv_indptr is None: the backend took the "
                "seq_lens fallback (kv_indptr from seq_lens + req_to_token)"
            )
        log(f"{tag} ok: kv_indptr={result['metrics']['kv_indptr']} {run}")
    elif result["status"] == "crashed":
        rec["status"] = "crashed"
        rec["crash"] = crash_record(
            rank=0,
            phase="draft-extend",
            forward_mode="IDLE",
            batch_size=BATCH_SIZE,
            exception_type=result["exception_type"],
            message=result["message"],
            traceback=result["traceback"],
            raised_at=_raised_at(result.get("frames", [])),
        )
        where = rec["crash"]["raised_at"] or {}
        log(
            f"{tag} crashed: {result['exception_type']}: {result['message']} "
            f"at {where.get('file')}:{where.get('line')} {run}"
        )
    else:
        _fail(
            rec,
            result.get("stage", "driver"),
            f"{result.get('exception_type')}: {result.get('message')}",
            result.get("missing"),
        )
        rec["error"]["traceback"] = result.get("traceback")
        log(f"{tag} error at stage {result.get('stage')}: {result.get('exception_type')}: {result.get('message')}")


def _replay_into(rec: dict, version: str, cache_dir: Path, log: Log, timeout_s: float, rebuild: bool) -> None:
    tag = f"[sglang-{version}]"
    start = time.perf_counter()
    try:
        env = ensure_env(version, cache_dir, log=log, rebuild=rebuild)
    except EnvBuildError as exc:
        rec["timings"]["install_s"] = round(time.perf_counter() - start, 1)
        log(f"{tag} install failed at step {exc.step}: {exc.missing}")
        _fail(rec, f"install:{exc.step}", exc.detail, exc.missing)
        return
    install_s = env.install_s if not env.cached else time.perf_counter() - start
    rec["timings"].update(install_s=round(install_s, 2), cached=env.cached, venv_build_s=env.built_in_s)
    rec["env"].update(venv=str(env.root), packages=env.packages)
    rec["notes"].extend(env.notes)
    log(f"{tag} running the real TritonAttnBackend.init_forward_metadata (TRITON_INTERPRET=1) ...")
    result, stderr, wall, timed_out = run_driver(env.python, timeout_s=timeout_s, src_root=env.src_root)
    rec["timings"]["run_s"] = round(wall, 2)
    if result is None:
        _fail(rec, "driver", f"replay subprocess gave no result; stderr tail: {stderr[-600:]}")
        rec["status"] = "timeout" if timed_out else "error"
        log(f"{tag} {rec['status']}: no result from the replay subprocess ({wall:.1f} s)")
        return
    _fill_from_result(rec, result, tag, log)
    if rec["status"] == "error" and Version(version) > Version(LAST_DRIVEN):
        rec["notes"].append(
            f"the replay harness is verified on 0.5.12-{LAST_DRIVEN}; newer releases "
            "need more set-up (e.g. a published runtime context) not done yet"
        )


def replay(
    version: str,
    cache_dir: Path | None = None,
    backend: str = "triton",
    log: Log = echo,
    timeout_s: float = 900,
    rebuild: bool = False,
) -> dict:
    """Replay the padded-IDLE draft-extend pass on the real sglang `version`; return a run record.

    status: "crashed" (init_forward_metadata raised), "ok", "timeout" or "error". Never
    raises: a bad version, a failed install or a failed import become "error" records that
    name the missing piece.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    rec = _record(str(version), backend)
    if backend not in SUPPORTED_BACKENDS:
        return _fail(
            rec,
            "config",
            f"backend {backend!r} is not replayed upstream yet; supported: "
            f"{', '.join(SUPPORTED_BACKENDS)} (flashinfer/flashinfer_mla/aiter/wave need "
            "their GPU libraries, fa3 needs sgl_kernel)",
        )
    try:
        check_version(str(version), known_releases(cache_dir))
        _replay_into(rec, str(version), cache_dir, log, timeout_s, rebuild)
    except ReleaseError as exc:
        _fail(rec, "version", str(exc))
    except Exception as exc:  # noqa: BLE001 - the caller gets a record, never an exception
        _fail(rec, "internal", f"{type(exc).__name__}: {exc}")
        log(f"[sglang-{version}] error: {type(exc).__name__}: {exc}")
    return rec
