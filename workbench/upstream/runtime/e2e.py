"""End-to-end verdicts for lint findings: does the real runtime raise at the read?

For the guard (``workbench upstream lint``): a finding is (backend, forward mode, class, attribute,
read file:line). Where the lane can drive that path (a CPU backend, an IDLE batch, a spec input the
EAGLE passes install on an idle DP rank), ``confirm_end_to_end`` runs the released runtime at DP 2
with one idle rank and compares where it raised with the read:

- ``confirmed end to end``: the real runtime raised AttributeError for that class and attribute at
  the finding's read (same file and line);
- ``not reached``: the run completed; the read is not on this deployment's path (DP 2, eager, CPU);
- ``raised elsewhere``: the run crashed at another line or on another class, even after the earlier
  passes' crashes of the same attribute were fixed (each fix named in the verdict);
- ``not drivable``: outside what the lane runs (a GPU backend, a non-IDLE mode, another input).

An earlier pass's crash on the same attribute (the verify pass's ``EagleVerifyInput`` before the
draft-extend pass) is fixed with the lane's ``verify-input`` fix and the run repeated, so a later
read is reached; the verdict lists the runs.
"""

from __future__ import annotations

from pathlib import Path

from workbench.upstream.releases import Log, echo

from .run import BACKENDS, run_runtime

PHASE_OF = {"EagleVerifyInput": "verify", "EagleDraftExtendInput": "draft-extend", "EagleDraftInput": "draft"}
EARLIER_FIX = {("EagleVerifyInput", "kv_indptr"): "verify-input"}


def drivable(finding: dict) -> str | None:
    """Why the lane cannot drive ``finding``, or None when it can."""
    if finding["backend"] not in BACKENDS:
        return f"backend {finding['backend']} does not run on CPU (lane backends: {', '.join(BACKENDS)})"
    if finding["forward_mode"] != "IDLE":
        return f"mode {finding['forward_mode']}: the lane's idle rank runs IDLE batches only"
    if finding["class"] not in PHASE_OF:
        return f"{finding['class']} is not installed by the EAGLE passes the lane runs ({', '.join(PHASE_OF)})"
    return None


def _at_read(rec: dict, finding: dict) -> bool:
    c = rec.get("crash") or {}
    at = c.get("raised_at") or {}
    file, _, line = finding["read"].rpartition(":")
    return (
        c.get("exception_type") == "AttributeError"
        and f"'{finding['class']}' object has no attribute '{finding['attribute']}'" in c.get("message", "")
        and at.get("file", "").endswith(file.split("sglang/", 1)[-1])
        and str(at.get("line")) == line
    )


def confirm_end_to_end(
    finding: dict,
    version: str,
    sglang_src: Path | None = None,
    cache_dir: Path | None = None,
    log: Log = echo,
    timeout_s: float = 300,
) -> dict:
    """The finding's end-to-end verdict (see the module docstring) with the runs that decided it."""
    why = drivable(finding)
    if why:
        return {"verdict": "not drivable", "reason": why, "runs": []}
    fixes: list[str] = []
    runs = []
    while True:
        rec = run_runtime(
            version,
            dp=2,
            backend=finding["backend"],
            fixes=fixes,
            sglang_src=sglang_src,
            reference=False,
            max_new_tokens=8,
            cache_dir=cache_dir,
            log=log,
            timeout_s=timeout_s,
        )
        c = rec.get("crash") or {}
        runs.append(
            {
                "fixes": list(fixes),
                "status": rec["status"],
                "crash": {
                    k: c.get(k)
                    for k in (
                        "rank",
                        "phase",
                        "forward_mode",
                        "batch_size",
                        "exception_type",
                        "message",
                        "raised_at",
                        "spec_info",
                    )
                }
                if c
                else None,
                "error": rec.get("error"),
            }
        )
        if rec["status"] == "error" or rec["status"] == "timeout":
            return {
                "verdict": "not drivable",
                "reason": f"the run ended {rec['status']}: {rec.get('error')}",
                "runs": runs,
            }
        if _at_read(rec, finding):
            return {
                "verdict": "confirmed end to end",
                "reason": f"rank {c['rank']} raised in the {c['phase']} pass at {finding['read']}",
                "runs": runs,
            }
        if rec["status"] == "ok":
            return {
                "verdict": "not reached",
                "reason": "the run completed: DP 2 with an idle rank never reached "
                f"{finding['read']} with {finding['class']}",
                "runs": runs,
            }
        earlier = EARLIER_FIX.get((c.get("spec_info"), finding["attribute"]))
        if earlier and earlier not in fixes and c.get("spec_info") != finding["class"]:
            fixes.append(earlier)  # an earlier pass crashed on the same attribute: fix it, run again
            continue
        return {
            "verdict": "raised elsewhere",
            "reason": f"{c.get('exception_type')}: {c.get('message')} at "
            f"{(c.get('raised_at') or {}).get('file')}:{(c.get('raised_at') or {}).get('line')}",
            "runs": runs,
        }
