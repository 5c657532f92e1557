"""Replays of every installed spec input on the real code, and the triage of lint findings.

For one source tree (a release or a checkout) the replay matrix is: each spec-input class x each
forward mode its workers install it in x the backends that run on CPU (triton under the Triton
interpreter, torch_native), all in one driver process. Each lint finding is then triaged:
`confirmed` (the real init_forward_metadata raised AttributeError for that class and attribute),
`refuted` (it completed, so the read is not reached for that input: the lint was wrong), or
`not replayable` on CPU (a GPU backend, a mode the driver does not build, or an input the
driver could not build), with the reason.

Scope: a replay drives the backend contract (the real `init_forward_metadata` on that input in
that mode), not the worker and runner code that leads there; `confirmed` says the backend raises
on what the worker installs, and whether a deployment reaches that call (DP attention padding an
idle batch, the runner's idle forward) is for the engineer to read off the cited install line.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from .sources.envs import ReplayEnv

DRIVER = Path(__file__).with_name("driver.py")
MARK = "WB_RESULT "
CPU_BACKENDS = ("triton", "torch_native")
DRIVEN_MODES = ("IDLE", "DECODE", "TARGET_VERIFY")
GPU_NEEDS = {
    "flashinfer": "the flashinfer library (CUDA)",
    "flashinfer_mla": "the flashinfer library (CUDA)",
    "aiter": "ROCm aiter kernels",
    "wave": "the wave kernels (ROCm)",
    "flashattention": "sgl_kernel FA3 (CUDA)",
    "xpu": "an Intel XPU",
    "intel_amx": "sgl_kernel's AMX CPU ops",
}


def module_of(path: str) -> str:
    """`sglang/srt/speculative/eagle_info.py` -> `sglang.srt.speculative.eagle_info`."""
    return path[:-3].replace("/", ".")


def replay_cases(analysis: dict) -> list[dict]:
    """The replay matrix of one lint analysis: installed class x its driven modes x CPU backends."""
    cases = []
    for cname, cls in sorted(analysis["spec_inputs"].items()):
        modes = sorted({m for i in analysis["installs"] if i["class"] == cname for m in i["modes"]})
        for mode in modes:
            if mode in DRIVEN_MODES:
                cases += [
                    {"module": module_of(cls["file"]), "class": cname, "mode": mode, "backend": b} for b in CPU_BACKENDS
                ]
    return cases


def run_driver(python: Path, cfg: dict, timeout_s: float) -> tuple[dict | None, str, float, bool]:
    """Run driver.py under `python` with TRITON_INTERPRET=1: (result or None, stderr tail, s, timed out)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(TRITON_INTERPRET="1", PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wb-replay-") as cwd:
        try:
            proc = subprocess.run(
                [str(python), "-I", str(DRIVER), json.dumps(cfg)],
                capture_output=True,
                text=True,
                cwd=cwd,
                env=env,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            tail = exc.stderr or ""
            tail = tail.decode("utf-8", "replace") if isinstance(tail, bytes) else tail
            return None, tail[-2000:], time.perf_counter() - start, True
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    try:
        result = json.loads(lines[-1][len(MARK) :]) if lines else None
    except ValueError:
        result = None
    return result, proc.stderr[-2000:], time.perf_counter() - start, False


def replay_matrix(env: ReplayEnv, cases: list[dict], timeout_s: float) -> dict:
    """All `cases` in one driver process on `env` (its sources first on the path)."""
    cfg = {"cases": cases, "src_root": str(env.src_root) if env.src_root else None}
    result, stderr, wall, timed_out = run_driver(env.python, cfg, timeout_s)
    if result is None:
        return {
            "status": "timeout" if timed_out else "error",
            "cases": [],
            "run_s": round(wall, 1),
            "message": f"no result from the replay process; stderr tail: {stderr[-600:]}",
        }
    return {
        "status": "ok" if "cases" in result else "error",
        "cases": result.get("cases", []),
        "run_s": round(wall, 1),
        "env": result.get("env"),
        "message": result.get("message"),
        "stage": result.get("stage"),
    }


def _raised_at(frames: list[dict]) -> str | None:
    for frame in reversed(frames or []):
        if f"{os.sep}sglang{os.sep}" in frame["file"]:
            return "sglang/" + frame["file"].split(f"{os.sep}sglang{os.sep}", 1)[1] + f":{frame['line']}"
    return None


def triage_one(finding: dict, by_case: dict, matrix: dict) -> dict:
    """The triage of one finding from the replay results (see the module docstring)."""
    be, mode, cls, attr = finding["backend"], finding["mode"], finding["spec_class"], finding["attr"]
    if be not in CPU_BACKENDS:
        why = f"{be} needs {GPU_NEEDS.get(be, 'a GPU library')}; not replayable on CPU"
        twin = by_case.get((cls, mode, "triton"))
        if twin is not None:
            why += f"; the triton replay of {cls} in {mode}: {_outcome(twin)}"
        return {"status": "not replayable", "reason": why}
    if mode not in DRIVEN_MODES:
        return {"status": "not replayable", "reason": f"the driver builds no {mode} batch on CPU yet"}
    case = by_case.get((cls, mode, be))
    if case is None:
        return {
            "status": "not replayable",
            "reason": f"no replay ran ({matrix.get('status')}: {matrix.get('message') or 'case missing'})",
        }
    where = _raised_at(case.get("frames"))
    if (
        case["status"] == "crashed"
        and case.get("exception_type") == "AttributeError"
        and f"'{cls}' object has no attribute '{attr}'" in case.get("message", "")
    ):
        return {
            "status": "confirmed",
            "reason": f"real init_forward_metadata raised AttributeError: {case['message']} at {where}",
            "raised_at": where,
        }
    if case["status"] == "ok":
        why = "an earlier check sends this input down another branch"
        if (case.get("batch") or {}).get("spec_info_kv_indptr_is_none") and attr != "kv_indptr":
            why = f"{cls}.kv_indptr is None on this input, so the backend takes the seq_lens fallback"
        return {
            "status": "refuted",
            "reason": f"real init_forward_metadata completed on {cls}'s "
            f"{case.get('spec_info_built_by', 'input')} in {mode}: the read at "
            f"{finding['read_file'].split('/')[-1]}:{finding['read_line']} is not reached ({why})",
        }
    if case["status"] == "crashed":
        return {
            "status": "not replayable",
            "reason": f"the replay raised {case.get('exception_type')}: "
            f"{case.get('message')} at {where} before deciding this read",
        }
    return {
        "status": "not replayable",
        "reason": f"could not build the replay at stage {case.get('stage')}: "
        f"{case.get('exception_type')}: {case.get('message')}",
    }


def _outcome(case: dict) -> str:
    if case["status"] == "ok":
        return "completed"
    return f"{case['status']} ({case.get('exception_type')}: {case.get('message')})"


VERDICT = {"confirmed": "confirmed", "refuted": "refuted", "not replayable": "unverified"}


def triage(analysis: dict, matrix: dict) -> list[dict]:
    """The analysis's findings, each with `verdict`, `verdict_reason`, `verdict_by` from the replays."""
    by_case = {(c["case"]["class"], c["case"]["mode"], c["case"]["backend"]): c for c in matrix.get("cases", [])}
    out = []
    for f in analysis["findings"]:
        t = triage_one(f, by_case, matrix)
        out.append({**f, "verdict": VERDICT[t["status"]], "verdict_reason": t["reason"], "verdict_by": "replay"})
    return out
