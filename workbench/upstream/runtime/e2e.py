"""End-to-end verdicts for the guard's findings: does the released runtime itself raise at the read?

The guard's opt-in step (``workbench upstream lint ... --replay --end-to-end``, ``guard.check(...,
end_to_end=True)``): after the replays gave every finding a verdict, each ``confirmed`` finding on a
path the real runtime drives (a CPU backend, an IDLE batch, a spec input an EAGLE pass installs on an idle DP
rank) is run end to end: the release's own scheduler, EAGLE worker and model runner at DP 2 with rank 1
idle (eager, no CUDA graphs, CPU). What the run did answers, per finding (``finding["end_to_end"]``):

- ``confirmed end to end``: the real runtime raised AttributeError for that class and attribute at
  the finding's read (same file and line); the finding's ``verdict`` becomes ``confirmed end to end``
  (``verdict_by`` ``real runtime``; the gate counts it as confirmed);
- ``not reached``: the run completed: the read is not on this deployment's path;
- ``raised elsewhere``: the run crashed at another line or on another class, even after the earlier
  passes' crashes of the same attribute were fixed (each fix named in the runs);
- ``not drivable``: outside what the real runtime runs (a GPU backend, a non-IDLE mode, another input); the
  finding keeps its verdict and nothing runs;
- ``undecided``: the run could not decide (an environment that did not build, a timeout, a known
  upstream limit of this release on CPU): the step's status is ``error`` and the gate fails closed.

An earlier pass's crash on the same attribute (the verify pass's ``EagleVerifyInput`` before the
draft-extend pass) is fixed with the real runtime's ``verify-input`` fix and the run repeated, so a later read
is reached; on a triton backend without 0.5.13's seq_lens fallback (0.5.12), the idle draft pass's
``None.shape`` on the ``EagleDraftInput``'s ``kv_indptr``, in the finding's function, is passed the
same way with ``triton-idle-fallback``. A finding whose spec input the V1 worker installs
(``speculative/eagle_worker.py``) is run with ``--disable-overlap-schedule``, which picks that worker
on 0.5.12. Runs are shared between the findings of one source (one run per backend and fix set). The
reachability the run answers goes to ``finding["reachability"]["end_to_end"]``: the deployment run,
``reached`` (True: it raised at the read; False: it completed, or raised before the read; None:
undecided), the verdict and its reason.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from workbench.run.serialise import from_dict, to_dict
from workbench.upstream.context import UpstreamContext
from workbench.upstream.sources.trees import SourceTree

from .release_record import RuntimeRecord
from .release_run import BACKENDS, run_runtime

PHASE_OF = {"EagleVerifyInput": "verify", "EagleDraftExtendInput": "draft-extend", "EagleDraftInput": "draft"}
EARLIER_FIX = {("EagleVerifyInput", "kv_indptr"): "verify-input"}
# the idle draft pass on a triton backend that reads a None kv_indptr (no seq_lens fallback: 0.5.12)
DRAFT_NONE = ("EagleDraftInput", "'NoneType' object has no attribute 'shape'", "triton-idle-fallback")
V1_WORKER = "sglang/srt/speculative/eagle_worker.py"
CONFIRMED_E2E = "confirmed end to end"
DEPLOYMENT = (
    "DP attention (dp = tp = 2, rank 1 idle), eager (no CUDA graphs), CPU (SGLang's CPU engine, Triton interpreter)"
)
MAX_NEW_TOKENS = 8
RUN_TIMEOUT_S = 300.0
_CRASH_KEYS = ("rank", "phase", "forward_mode", "batch_size", "exception_type", "message", "raised_at", "spec_info")


def drivable(finding: dict) -> str | None:
    """Why the real runtime cannot drive ``finding``, or None when it can."""
    if finding["backend"] not in BACKENDS:
        return f"backend {finding['backend']} does not run on CPU (lane backends: {', '.join(BACKENDS)})"
    if finding["mode"] != "IDLE":
        return f"mode {finding['mode']}: the lane's idle rank runs IDLE batches only"
    if finding["spec_class"] not in PHASE_OF:
        return f"{finding['spec_class']} is not installed by the EAGLE passes the lane runs ({', '.join(PHASE_OF)})"
    return None


def _read(finding: dict) -> str:
    return f"{finding['read_file']}:{finding['read_line']}"


def _at_read(rec: RuntimeRecord, finding: dict) -> bool:
    c = rec.crash
    if c is None:
        return False
    at = c.raised_at or {}
    return (
        c.exception_type == "AttributeError"
        and f"'{finding['spec_class']}' object has no attribute '{finding['attr']}'" in (c.message or "")
        and (at.get("file") or "").endswith(finding["read_file"].split("sglang/", 1)[-1])
        and str(at.get("line")) == str(finding["read_line"])
    )


def _command(version: str, sglang_src: Path | None, backend: str, fixes: list[str], v1: bool = False) -> str:
    src = f" --sglang-src {sglang_src}" if sglang_src is not None else ""
    fix = "".join(f" --fix {f}" for f in fixes)
    flag = " --disable-overlap-schedule" if v1 else ""
    return f"workbench upstream run --sglang {version}{src} --dp 2 --backend {backend}{fix}{flag} --no-reference"


def _earlier_fix(rec: RuntimeRecord, finding: dict, fixes: list[str]) -> str | None:
    """The real runtime's fix for an earlier pass's crash that stands before the finding's read, or None."""
    c = rec.crash
    if c is None or c.spec_info == finding["spec_class"]:
        return None
    fix = EARLIER_FIX.get((c.spec_info, finding["attr"]))
    at = c.raised_at or {}
    in_function = (at.get("file") or "").endswith(finding["read_file"].split("sglang/", 1)[-1]) and (
        at.get("function") == finding["read_function"].rsplit(".", 1)[-1]
    )
    if fix is None and finding["backend"] == "triton" and in_function and finding["attr"] == "kv_indptr":
        cls, message, name = DRAFT_NONE
        fix = name if (c.spec_info, c.message) == (cls, message) else None
    return fix if fix and fix not in fixes else None


def _summary(rec: RuntimeRecord, fixes: list[str], command: str, index: int) -> dict:
    c = rec.crash
    return {
        "fixes": list(fixes),
        "status": rec.status,
        "crash": {k: getattr(c, k) for k in _CRASH_KEYS} if c else None,
        "error": to_dict(rec.error) if rec.error else None,
        "limits": rec.limits,
        "ranks_s": rec.timings.get("ranks_s"),
        "command": command,
        "record": index,  # the full run record: the source's end_to_end["records"][index]
    }


def confirm_end_to_end(
    ctx: UpstreamContext,
    finding: dict,
    version: str,
    sglang_src: Path | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
    records: list[dict] | None = None,
) -> dict:
    """The finding's end-to-end verdict (module docstring): {verdict, reason, runs, deployment}.

    ``version`` is the release run (or whose environment runs the checkout ``sglang_src``). ``records``
    collects the full run records (their JSON form); a run already in it (same backend and fixes) is
    not run again.
    """
    out = {"verdict": "not drivable", "reason": drivable(finding), "runs": [], "deployment": DEPLOYMENT}
    if out["reason"]:
        return out
    records = [] if records is None else records
    fixes: list[str] = []
    v1 = finding.get("install_file") == V1_WORKER
    while True:
        typed = [from_dict(RuntimeRecord, r) for r in records]
        done = [
            i
            for i, r in enumerate(typed)
            if r.config.backend == finding["backend"]
            and r.config.fixes == fixes
            and r.config.disable_overlap_schedule == v1
        ]
        if done:
            rec, index = typed[done[0]], done[0]
        else:
            data = run_runtime(
                ctx,
                version,
                dp=2,
                backend=finding["backend"],
                fixes=fixes,
                sglang_src=sglang_src,
                max_new_tokens=MAX_NEW_TOKENS,
                reference=False,
                disable_overlap_schedule=v1,
                timeout_s=timeout_s,
            )
            records.append(data)
            rec, index = from_dict(RuntimeRecord, data), len(records) - 1
        out["runs"].append(_summary(rec, fixes, _command(version, sglang_src, finding["backend"], fixes, v1), index))
        c = rec.crash
        if rec.status in ("error", "timeout") or rec.limits:
            why = "; ".join(rec.limits) or (rec.error.message if rec.error else None) or rec.status
            out["verdict"] = "undecided"
            out["reason"] = f"the run could not decide: it ended {rec.status}: {why}"
            return out
        if c is not None and _at_read(rec, finding):
            out["verdict"] = CONFIRMED_E2E
            out["reason"] = (
                f"the real runtime raised it: rank {c.rank} in the {c.phase} pass ({c.forward_mode}, "
                f"batch size {c.batch_size}) at {_read(finding)}"
                + (f", with {' + '.join(fixes)} applied to reach it" if fixes else "")
            )
            return out
        if rec.status == "ok":
            out["verdict"] = "not reached"
            out["reason"] = (
                f"the run completed: {DEPLOYMENT} never reached {_read(finding)} with {finding['spec_class']}"
            )
            return out
        earlier = _earlier_fix(rec, finding, fixes)
        if earlier:
            fixes.append(earlier)  # an earlier pass crashed before the finding's read: fix it, run again
            continue
        at = (c.raised_at if c else None) or {}
        out["verdict"] = "raised elsewhere"
        out["reason"] = (
            f"{c.exception_type if c else None}: {c.message if c else None} at {at.get('file')}:{at.get('line')}"
        )
        return out


def _runnable(tree: SourceTree, env_release: str | None, scratch: Path) -> tuple[str, Path | None]:
    """(the release run or whose environment runs it, the checkout folder or None for a release)."""
    if not tree.changes and tree.root is not None and tree.label == f"sglang {tree.release}":
        return tree.release, None
    if not env_release:
        raise ValueError(f"{tree.label}: no release environment to run it on")
    if not tree.changes and tree.root is not None:
        return env_release, tree.root
    return env_release, tree.write(scratch)  # an edited tree: written out as a checkout


def end_to_end_verdicts(
    ctx: UpstreamContext,
    tree: SourceTree,
    env_release: str | None,
    findings: list[dict],
    timeout_s: float = RUN_TIMEOUT_S,
) -> tuple[list[dict], dict]:
    """(the findings, a summary): every ``confirmed`` finding gets ``end_to_end`` (the others None), the
    drivable ones decided by runs of the real runtime, with ``reachability["end_to_end"]``.

    The summary: ``status`` ok / error (a run could not decide: the gate fails closed), ``message``,
    ``verdicts`` (counts), ``records`` (every run's full record), ``run_s``.
    """
    t0 = time.perf_counter()
    out = [{**f, "end_to_end": None} for f in findings]
    todo = []
    for i, f in enumerate(out):
        why = drivable(f) if f.get("verdict") == "confirmed" else None
        if why:
            f["end_to_end"] = {"verdict": "not drivable", "reason": why, "runs": [], "deployment": DEPLOYMENT}
        elif f.get("verdict") == "confirmed":
            todo.append(i)
    summary: dict = {"status": "ok", "message": None, "verdicts": {}, "records": [], "run_s": 0.0}
    if not todo:
        summary["message"] = "no confirmed finding on a path the real runtime drives"
        return out, summary
    scratch = Path(tempfile.mkdtemp(prefix="wb-e2e-"))
    try:
        version, src = _runnable(tree, env_release, scratch)
        ctx.log(f"[{tree.label}] end to end: {len(todo)} confirmed finding(s) on the real runtime (sglang {version})")
        for i in todo:
            f = out[i]
            e = confirm_end_to_end(ctx, f, version, src, timeout_s, summary["records"])
            f["end_to_end"] = e
            reach = dict(f.get("reachability") or {})
            reach["end_to_end"] = {
                "deployment": DEPLOYMENT,
                "reached": {CONFIRMED_E2E: True, "not reached": False, "raised elsewhere": False}.get(e["verdict"]),
                "verdict": e["verdict"],
                "reason": e["reason"],
            }
            f["reachability"] = reach
            if e["verdict"] == CONFIRMED_E2E:
                f.update(
                    verdict=CONFIRMED_E2E,
                    verdict_by="real runtime",
                    verdict_reason=f"{e['reason']}; the replay: {f['verdict_reason']}",
                )
            summary["verdicts"][e["verdict"]] = summary["verdicts"].get(e["verdict"], 0) + 1
            if e["verdict"] == "undecided" and summary["status"] == "ok":
                summary.update(status="error", message=f"{f['key']}: {e['reason']}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary["run_s"] = round(time.perf_counter() - t0, 1)
    ctx.log(f"[{tree.label}] end to end: {summary['verdicts']} in {summary['run_s']} s")
    return out, summary
