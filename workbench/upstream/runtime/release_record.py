"""The real runtime's run record (``RuntimeRecord``): the workbench's run record shape, filled
from the ranks; ``workbench.run.serialise`` turns it into JSON and back.

``status`` ok / crashed / timeout / error (``workbench.run.record.STATUSES``); ``crash`` has the
fields of the workbench's one crash record (``workbench.run.record.Crash``), taken from the first
failing rank's report (rank, phase, forward mode, batch size, the traceback through the real
scheduler and worker, ``raised_at`` the innermost frame inside sglang); ``rank_failures`` holds what
the other ranks raised afterwards.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.run.record import Crash, outputs_sha256
from workbench.run.serialise import from_dict

from .rank_result import RankResult

LANE = "real-runtime"
KERNELS = {
    "triton": "real sglang TritonAttnBackend (triton interpreter, CPU)",
    "torch_native": "real sglang TorchNativeAttnBackend (torch SDPA, CPU)",
}
# The innermost function of a speculative worker on the stack names the pass a crash happened in.
_PHASES = (
    ("draft_extend", "draft-extend"),
    ("verify", "verify"),
    ("forward_target_extend", "prefill"),
    ("draft", "draft"),
)


@dataclass
class RuntimeConfig:
    """What a real-runtime run was asked to do (``run.run_runtime``'s arguments, resolved)."""

    sglang: str
    sglang_src: str | None
    dp: int
    backend: str
    fixes: list[str]
    steps: int
    topk: int
    draft_tokens: int
    max_new_tokens: int
    draft_backend: str
    revision: str  # the code state as one label (``run.code_state``)
    apply_fix_in_place: bool
    mode: str
    model_dir: str
    seed: int
    prompts: list[str]
    disable_overlap_schedule: bool
    timeout_s: float
    kernel: str
    kernel_stand_in: bool
    idle_ranks: list[int]
    extra_shims: list[str] = field(default_factory=list)
    bundle_dir: str | None = None
    idle: str | None = None  # "start" | "mid" (``run.IDLE_MODES``)
    algorithm: str = "EAGLE3"  # --speculative-algorithm (``run.ALGORITHMS``)
    draft_model: str | None = "draft"  # its folder under assets/runtime_models (``run.DRAFT_MODEL``), None for NGRAM


@dataclass
class RuntimeCrash(Crash):
    """The workbench's crash record, plus the batch's spec_info class and why no bundle was written."""

    spec_info: str | None = None
    bundle_error: str | None = None


@dataclass
class RunError:
    """Why a run ended with status error: the stage, a message, the missing package (an install)."""

    stage: str | None
    message: str
    missing: str | None = None
    traceback: str | None = None
    rank: int | None = None
    violations: list[dict] | None = None  # shim-guard violations, each with its rank and when
    crash: RuntimeCrash | None = None  # the crash a shim-guard violation overrode


@dataclass
class Reference:
    """HF transformers' greedy tokens for the prompts, and whether the run's outputs equal them."""

    equal: bool | None
    source: str | None = None
    outputs: list[list[int]] | None = None
    first_difference: dict | None = None
    error: str | None = None


@dataclass
class RuntimeRecord:
    """One real-runtime run (``status`` error until ``fill`` sets how it ended)."""

    status: str
    config: RuntimeConfig
    lane: str = "real-runtime"
    crash: RuntimeCrash | None = None
    rank_failures: list[RuntimeCrash] = field(default_factory=list)
    error: RunError | None = None
    outputs: list[list[int] | None] | None = None
    outputs_text: list[str] | None = None
    outputs_sha256: str | None = None
    reference: Reference | None = None
    metrics: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    shims: list[dict] = field(default_factory=list)
    shim_guard: dict | None = None
    fixes: list = field(default_factory=list)
    equivalences: list = field(default_factory=list)  # a CPU branch made for intel_amx, run as its CUDA branch
    extra_shims: list = field(default_factory=list)  # test-only files loaded into the ranks (--extra-shim)
    limits: list[str] = field(default_factory=list)  # known upstream limits: the release cannot run this here
    processes: dict = field(default_factory=dict)  # exit_codes, left_running, ended_by
    env: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    logs: str | None = None  # where the ranks' logs were kept (a nightly cell's log folder)
    role: str | None = None  # the suite's role and command (``suite.py``)
    command: str | None = None


_WORKER_FILES = ("eagle_worker", "standalone_worker", "ngram_worker")  # the speculative workers the real runtime starts


# Upstream limits a run can end on, recognised by what it raised or recorded: (test, note). Only what stops a run
# on this CPU and not on a GPU: torch_native's verify pass (``extend_prefix_lens`` None at
# torch_native_backend.py:101) takes the same device-free lines on CUDA, so it is a crash (sglang #36352), not a limit.
KNOWN_LIMITS: tuple[tuple[Callable[[RuntimeRecord], bool], str], ...] = (
    (
        lambda rec: rec.crash is not None and "get_cpu_graph_seq_len_fill_value" in (rec.crash.message or ""),
        "SGLang's CPU DP padding (forward_batch_info._pad_inputs_to_size) asks the attention backend for "
        "get_cpu_graph_seq_len_fill_value, which only the intel_amx (and hybrid linear) backends define: DP "
        "attention with this backend cannot run on a CPU in this release",
    ),
    (
        lambda rec: (
            rec.config.backend == "triton"
            and any(
                isinstance(t, dict) and t.get("tree_mask_mode") == "QLEN_ONLY"
                for k, t in rec.timings.items()
                if k.startswith("rank")
            )
        ),
        "the release's CPU engine chose the QLEN_ONLY verify tree mask (eagle_utils.default_tree_mask_mode, made for "
        "the intel_amx backend); the triton backend's kernels consume FULL_MASK, so the verify pass attends "
        "through the wrong mask and the outputs need not equal HF's",
    ),
)


def new(cfg: dict) -> RuntimeRecord:
    """An empty record (status error until filled) for ``cfg`` (``RuntimeConfig``'s fields but the kernel's)."""
    config = from_dict(
        RuntimeConfig,
        {**cfg, "kernel": KERNELS[cfg["backend"]], "kernel_stand_in": False, "idle_ranks": list(range(1, cfg["dp"]))},
    )
    env = {"host_python": sys.version.split()[0], "platform": platform.platform(), "device": "cpu"}
    return RuntimeRecord(status="error", config=config, lane=LANE, env=env)


def fail(rec: RuntimeRecord, stage: str, message: str, missing: str | None, t0: float) -> RuntimeRecord:
    """Mark ``rec`` as a run that could not start (status error) and return it."""
    rec.status = "error"
    rec.error = RunError(stage=stage, message=message, missing=missing)
    rec.timings["wall_s"] = round(time.perf_counter() - t0, 2)
    return rec


def phase_of(frames: list[dict], forward_mode: str | None) -> str | None:
    """The speculative pass a traceback was in: the innermost worker function (``_WORKER_FILES``) naming one."""
    for frame in reversed(frames):
        if not any(w in os.path.basename(frame["file"]) for w in _WORKER_FILES):
            continue
        for key, phase in _PHASES:
            if key in frame["function"]:
                return phase
        if frame["function"] == "forward_batch_generation" and "target_worker" in frame.get("code", ""):
            return "prefill"  # the worker's own call of the target's prefill
    return "prefill" if forward_mode == "EXTEND" else None


def raised_in_sglang(frames: list[dict]) -> dict | None:
    """The innermost frame inside sglang, its path relative to the package root."""
    marker = f"{os.sep}sglang{os.sep}"
    for frame in reversed(frames):
        if marker in frame["file"]:
            return {**frame, "file": "sglang" + os.sep + frame["file"].split(marker, 1)[1]}
    return frames[-1] if frames else None


def _crash(res: RankResult) -> RuntimeCrash:
    """The crash of one rank's report (``release_rank.py``'s result)."""
    batch = res.batch
    return RuntimeCrash(
        rank=res.rank,
        phase=phase_of(res.frames, batch.get("forward_mode")),
        forward_mode=batch.get("forward_mode"),
        batch_size=batch.get("batch_size"),
        exception_type=res.exception or "",
        message=res.message or "",
        traceback=res.traceback,
        time=res.time,
        raised_at=raised_in_sglang(res.frames),
        bundle=res.bundle,  # the rank's crash bundle (rank_bundle.py), kept in the run's bundle folder
        spec_info=batch.get("spec_info"),
        bundle_error=res.bundle_error,
    )


def fill(rec: RuntimeRecord, ranks, prompts: list[list[int]]) -> None:
    """Status, crash, outputs, metrics, process facts and known upstream limits from a ``launch.RankRun``."""
    results = ranks.results
    rec.processes = {"exit_codes": ranks.exit_codes, "left_running": ranks.left_running, "ended_by": ranks.ended_by}
    rec.timings["ranks_s"] = ranks.wall_s
    for r in sorted(results):
        rec.timings[f"rank{r}"] = results[r].timings
    _fill(rec, ranks, prompts)
    _hold_guard(rec, results)
    rec.limits = [note for test, note in KNOWN_LIMITS if test(rec)]
    rec.notes += rec.limits


def guard_violations(results: dict[int, RankResult]) -> list[dict]:
    """Every rank's shim-guard violations, after set-up and after the run, with the rank and when."""
    out = []
    for r in sorted(results):
        guard = results[r].shim_guard or {}
        for when, part in (("after set-up", guard), ("after the run", guard.get("after_run") or {})):
            out += [{**v, "rank": r, "when": when} for v in part.get("violations", [])]
    return out


def _hold_guard(rec: RuntimeRecord, results: dict[int, RankResult]) -> None:
    """A shim-guard violation in any rank, or a completed run whose ranks did not all hold the guard
    after it, ends the run with status error (any crash is kept in ``error.crash``)."""
    rec.extra_shims = next((r.extra_shims for r in results.values() if r.extra_shims), [])
    if rec.shim_guard is not None:
        rec.shim_guard["ranks"] = {
            str(r): {
                "modules": (res.shim_guard or {}).get("modules"),
                "after_run": "after_run" in (res.shim_guard or {}),
            }
            for r, res in sorted(results.items())
        }
    bad = guard_violations(results)
    unheld = [r for r in range(rec.config.dp) if r not in results or "after_run" not in (results[r].shim_guard or {})]
    if not bad and not (rec.status == "ok" and unheld):
        return
    names = "; ".join(f"rank {v['rank']} {v['when']}: {v['module']}:{v['name']} ({v['kind']})" for v in bad[:10])
    message = (
        f"the shim guard found protected code changed: {names}"
        if bad
        else (f"the shim guard was not held after the run on rank(s) {unheld}")
    )
    rec.error = RunError(stage="shim-guard", message=message, violations=bad, crash=rec.crash)
    rec.status, rec.crash, rec.rank_failures = "error", None, []


def _fill(rec: RuntimeRecord, ranks, prompts: list[list[int]]) -> None:
    results = ranks.results
    failed = sorted((r for r in results.values() if r.status != "ok"), key=lambda r: r.time or 0)
    reporting = next((results[r] for r in sorted(results) if results[r].shims), None)
    if reporting:
        rec.shims, rec.fixes = reporting.shims, reporting.fixes
        rec.shim_guard = reporting.shim_guard
        rec.equivalences = reporting.equivalences
    if failed:
        first = failed[0]
        if first.status == "crashed":
            rec.status = "crashed"
            rec.crash = _crash(first)
            rec.rank_failures = [_crash(r) for r in failed[1:] if r.status == "crashed"]
        else:
            rec.status = "error"
            rec.error = RunError(
                stage=first.stage,
                message=f"{first.exception}: {first.message}",
                traceback=first.traceback,
                rank=first.rank,
            )
        return
    if ranks.ended_by == "timeout":
        rec.status = "timeout"
        rec.error = RunError(stage="run", message=f"no result within {rec.config.timeout_s} s")
        return
    if ranks.ended_by != "ok":
        rec.status = "error"
        rec.error = RunError(stage="run", message=f"a rank exited without a result (exit codes {ranks.exit_codes})")
        return
    done = results[0]
    outputs = [done.outputs.get(f"p{i}") for i in range(len(prompts))]
    rec.status = "ok"
    rec.outputs = outputs
    rec.outputs_text = [bytes(t for t in o if t < 256).decode("utf-8", "replace") for o in outputs]
    rec.outputs_sha256 = outputs_sha256(outputs)
    verify = sum(s.get("spec_verify_ct", 0) for s in done.spec.values())
    correct = sum(s.get("spec_num_correct_drafts", 0) for s in done.spec.values())
    rec.metrics = {
        "tokens": sum(len(o) for o in outputs),
        "verify_passes": verify,
        "accepted_drafts": correct,
        # tokens per verify pass: the accepted drafts plus the bonus token, as SGLang reports it
        "accept_length_mean": round((correct + verify) / verify, 3) if verify else None,
        "generate_s": done.timings.get("generate_s"),
    }


def check_reference(rec: RuntimeRecord, ref: dict) -> None:
    """``reference``: HF transformers' greedy tokens (``ref``, the reference process's result) and
    whether the run's outputs equal them."""
    if "error" in ref:
        rec.reference = Reference(equal=None, error=ref["error"])
        return
    outs, refs = rec.outputs, ref["outputs"]
    diff = next(
        (
            {"prompt": i, "position": next((j for j, (a, b) in enumerate(zip(o, e, strict=False)) if a != b), None)}
            for i, (o, e) in enumerate(zip(outs, refs, strict=True))
            if o != e
        ),
        None,
    )
    rec.reference = Reference(
        equal=outs == refs,
        source=f"HF transformers {ref['transformers']} {ref['architecture']}, float32, greedy, no cache",
        outputs=refs,
        first_difference=diff,
    )
    rec.timings["reference_s"] = ref.get("reference_s")


def one_line(rec: RuntimeRecord) -> str:
    """A one-line summary: status, and the crash or the accept length."""
    if rec.crash:
        c = rec.crash
        at = c.raised_at or {}
        return (
            f"crashed: rank {c.rank} phase {c.phase} mode {c.forward_mode} bs {c.batch_size}: "
            f"{c.exception_type}: {c.message} at {at.get('file')}:{at.get('line')}"
        )
    if rec.status == "ok":
        return f"ok: {rec.metrics['tokens']} tokens, accept length {rec.metrics['accept_length_mean']}"
    return f"{rec.status}: {rec.error.message if rec.error else None}"
