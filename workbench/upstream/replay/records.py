"""The seed crash on one release as a run record: the padded-IDLE draft-extend pass on the real
``TritonAttnBackend`` (``workbench upstream replay --sglang X``, notebook 04's replay table).

The record (``ReplayRecord``) has the shape of the workbench's own run records
(``workbench.run.record``): status ``crashed`` (the real ``init_forward_metadata`` raised, ``crash`` a
``Crash``), ``ok``, ``timeout`` or ``error`` (a bad version, an environment that did not build, a
set-up step that failed: ``error`` names it). ``seed_record`` returns its JSON form
(``workbench.run.serialise.to_dict``); ``read_replay_record`` reads one back strictly, the shipped
``workbench/assets/upstream_replays.json`` included.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from typing import Literal

from packaging.version import Version

from workbench.run.record import Crash
from workbench.run.serialise import from_dict, to_dict

from ..context import Log, UpstreamContext
from ..sources.envs import EnvBuildError, ensure_env
from ..sources.releases import ReleaseError, check_versions
from .cases import SEED_CASE
from .front import replay
from .run_end import CaseRun, case_runs

SUPPORTED_BACKENDS = ("triton",)
KERNEL = "real sglang TritonAttnBackend (triton interpreter, CPU)"
BATCH_SIZE = 2
BATCH = f"IDLE padded bs={BATCH_SIZE}"
LAST_DRIVEN = "0.5.23"  # the newest release this harness was run on


@dataclass
class ReplayConfig:
    """What the seed replay ran: the release, the backend and the batch."""

    sglang: str
    backend: str
    kernel: str = KERNEL
    batch: str = BATCH
    phase: str = "draft-extend"
    forward_mode: str = "IDLE"
    dp_attention_padding: bool = True


@dataclass
class ReplayError:
    """Why a seed replay ended with status error: the stage, a message, the missing package (an install)."""

    stage: str
    message: str
    missing: str | None = None


@dataclass
class ReplayRecord:
    """The seed crash's run record on one release."""

    status: Literal["ok", "crashed", "timeout", "error"]
    config: ReplayConfig
    crash: Crash | None = None
    error: ReplayError | None = None
    metrics: dict = field(default_factory=dict)
    timings: dict = field(default_factory=lambda: {"install_s": 0.0, "run_s": 0.0, "cached": False})
    env: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_replay_record(data: dict) -> ReplayRecord:
    """A seed replay record from its JSON form; ``RecordError`` naming the field when it does not fit."""
    return from_dict(ReplayRecord, data)


def _record(version: str, backend: str) -> ReplayRecord:
    env = {
        "host_python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": "cpu",
        "interpreter": "TRITON_INTERPRET=1",
    }
    return ReplayRecord("error", ReplayConfig(version, backend), env=env)


def _fail(rec: ReplayRecord, stage: str, message: str, missing: str | None = None) -> ReplayRecord:
    rec.status = "error"
    rec.error = ReplayError(stage, message, missing)
    return rec


def raised_at(frame: dict | None) -> dict | None:
    """A driver frame {"at": "sglang/...py:LINE", function, code} as a record's {file, line, ...}."""
    if not frame:
        return None
    path, _, line = frame["at"].rpartition(":")
    return {"file": path, "line": int(line), "function": frame.get("function"), "code": frame.get("code")}


def _fill_from_case(rec: ReplayRecord, case: dict, tag: str, log: Log) -> None:
    """The record's status, crash or metrics from the seed case's first run."""
    rec.metrics["padded_batch"] = case.get("batch")
    rec.notes += case.get("stand_ins", []) + case.get("notes", [])
    run = next(iter(case_runs(case)), CaseRun("error"))  # no run: `error`, as `run_end.ended` says
    if case.get("error"):
        _fail(rec, case.get("stage", "driver"), case["error"])
        log(f"{tag} error at stage {case.get('stage')}: {case['error']}")
    elif run.returned:
        rec.status = "ok"
        rec.metrics.update(run.metrics)
        rec.notes.append(
            "the idle EagleDraftExtendInput's kv_indptr is None: the backend took the seq_lens fallback "
            "(kv_indptr from seq_lens + req_to_token)"
        )
        log(f"{tag} ok: kv_indptr={rec.metrics.get('kv_indptr')}")
    elif run.crashed:
        rec.status = "crashed"
        rec.crash = Crash(
            rank=0,
            phase="draft-extend",
            forward_mode="IDLE",
            batch_size=BATCH_SIZE,
            exception_type=run.exception,
            message=run.message,
            traceback=run.traceback,
            raised_at=raised_at((run.frames or [None])[-1]),
        )
        log(f"{tag} crashed: {run.exception}: {run.message} at {run.raised_at}")
    else:
        _fail(rec, "init_forward_metadata", f"{run.describe()}: {run.exception}: {run.message}")


def seed_record(ctx: UpstreamContext, version: str, backend: str = "triton") -> dict:
    """The padded-IDLE draft-extend pass on the real sglang `version` as a run record (a ``ReplayRecord``'s
    JSON form); never raises."""
    return to_dict(_seed(ctx, str(version), backend))


def _seed(ctx: UpstreamContext, version: str, backend: str) -> ReplayRecord:
    rec = _record(version, backend)
    tag = f"[sglang-{version}]"
    if backend not in SUPPORTED_BACKENDS:
        return _fail(
            rec,
            "config",
            f"backend {backend!r} is not replayed upstream yet; supported: {', '.join(SUPPORTED_BACKENDS)} "
            "(flashinfer/flashinfer_mla/aiter/wave need their GPU libraries, fa3 needs sgl_kernel)",
        )
    try:
        check_versions(ctx, [version])
        env = ensure_env(ctx, version)
    except ReleaseError as exc:
        return _fail(rec, "version", str(exc))
    except EnvBuildError as exc:
        ctx.log(f"{tag} install failed at step {exc.step}: {exc.missing}")
        return _fail(rec, f"install:{exc.step}", exc.detail, exc.missing)
    rec.timings.update(install_s=env.install_s, cached=env.cached, venv_build_s=env.built_in_s)
    rec.env.update(venv=str(env.root), packages=env.packages)
    rec.notes.extend(env.notes)
    ctx.log(f"{tag} running the real TritonAttnBackend.init_forward_metadata (TRITON_INTERPRET=1) ...")
    result = replay(ctx, version, [{**SEED_CASE, "answer_missing": False}])
    rec.timings["run_s"] = result["run_s"]
    rec.timings["driver_s"] = result.get("driver_s")
    rec.env.update({k: v for k, v in (result.get("env") or {}).items() if k in ("python", "TRITON_INTERPRET")})
    if result["status"] != "ok" or not result["cases"]:
        rec = _fail(rec, result.get("stage") or "driver", result.get("message") or "no case ran", result.get("missing"))
        rec.status = "timeout" if result["status"] == "timeout" else "error"
        if Version(version) > Version(LAST_DRIVEN):
            rec.notes.append(
                f"the replay harness was run on 0.5.10-{LAST_DRIVEN}; a newer release may need more set-up"
            )
        return rec
    _fill_from_case(rec, result["cases"][0], tag, ctx.log)
    return rec
