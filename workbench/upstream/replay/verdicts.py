"""A real-code verdict for every finding, from the replays (see docs/upstream-guard.md).

- ``confirmed``: the real backend's ``init_forward_metadata`` raised ``AttributeError`` for the
  finding's attribute at the finding's read line, on a real instance of the class in that mode;
- ``refuted``: it ran on a real instance and the read did not raise (its line never ran, or ran
  on a value the instance has);
- ``traced: raised`` / ``traced: not read``: a backend whose metadata needs a GPU library, run
  on CPU with the library stubbed and ``spec_info`` behind the recording proxy up to the first
  library call: the read raised before that point, or was not made before it;
- ``unreachable``: set by the static side (no runner path); it stands unless the replay confirms the
  read, which is stronger evidence: the finding is then ``confirmed`` (``static_verdict`` and
  ``static_reason`` keep what the runner paths said); otherwise the replay's verdict is shown beside it
  (``replay_verdict``, ``replay_reason``);
- ``unverified``: the replay could not decide, with the reason.

A read behind an earlier crash of the same replay is decided on the run that answered the earlier
attribute with a class-level default None (that finding's smallest fix); the verdict says so. The
replays run with EAGLE's chain settings (``FIRST``: topk 1); a read whose line never ran there is
replayed again with a draft tree (``SECOND``: topk 2), and the verdict names the settings it used.
"""

from __future__ import annotations

from collections.abc import Callable

from ..context import UpstreamContext
from ..sources.trees import SourceTree
from .cases import case_key, plan
from .front import replay
from .opposite_branches import other_branch
from .run_end import LIBRARY_CALL, NO_METADATA_CALL, CaseRun, case_runs


def verdicts(ctx: UpstreamContext, tree: SourceTree, analysis: dict) -> list[dict]:
    """`analysis["findings"]`, each with `verdict`, `verdict_reason`, `verdict_by` and `replay`."""
    return replay_verdicts(ctx, tree, analysis)[0]


def replay_verdicts(ctx: UpstreamContext, tree: SourceTree, analysis: dict) -> tuple[list[dict], dict]:
    """(the findings with their verdicts, a summary of the replay run: status, environment, time)."""
    findings = analysis["findings"]
    if not findings:
        return [], {"status": "ok", "cases": 0, "run_s": 0.0, "message": "no findings: nothing to replay"}
    cases = plan(findings)
    ctx.log(f"[{tree.label}] replaying {len(cases)} case(s) for {len(findings)} finding(s) ...")
    result = replay(ctx, tree, cases)
    by_key = {c["case"]["key"]: c for c in result["cases"]}
    out = [_with_settings(decide(f, by_key, result, tree.get), FIRST) for f in findings]
    again = [
        i
        for i, f in enumerate(out)
        if f["verdict"] in ("refuted", "traced: not read") and "never ran" in f["verdict_reason"]
    ]
    if again and result["status"] == "ok":
        ctx.log(f"[{tree.label}] {len(again)} read line(s) never ran: replaying them with {_text(SECOND)} ...")
        second = replay(ctx, tree, plan([findings[i] for i in again]), extra={"server_args": SECOND})
        by_key2 = {c["case"]["key"]: c for c in second["cases"]}
        for i in again:
            other = _with_settings(decide(findings[i], by_key2, second, tree.get), SECOND)
            if "never ran" not in other["verdict_reason"] and other["verdict"] != "unverified":
                out[i] = {**other, "verdict_reason": f"with {_text(SECOND)}: {other['verdict_reason']}"}
            else:
                out[i]["verdict_reason"] += f"; with {_text(SECOND)} too"
        result["run_s"] = round(result["run_s"] + second["run_s"], 1)
    counts: dict[str, int] = {}
    for f in out:
        counts[f["verdict"]] = counts.get(f["verdict"], 0) + 1
    summary = {k: result.get(k) for k in ("status", "message", "stage", "run_s", "env_release", "env_group", "env")}
    summary.update(cases=len(by_key), planned=len(cases), verdicts=counts)
    ctx.log(
        f"[{tree.label}] {len(by_key)} replay case(s) in {result['run_s']} s on {result.get('env_group')}: {counts}"
    )
    return out, summary


FIRST = {"speculative_num_steps": 3, "speculative_num_draft_tokens": 4, "speculative_eagle_topk": 1}
SECOND = {"speculative_eagle_topk": 2}  # a draft tree: reads gated on topk > 1 (tree verify, Mamba tree state)


def _text(settings: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items())


def _with_settings(f: dict, settings: dict) -> dict:
    if f.get("replay"):
        f["replay"]["settings"] = {**FIRST, **settings}
    return f


def _short(loc: str | None) -> str:
    return loc.rsplit("/", 1)[-1] if loc else "?"


def _details(case: dict, run: CaseRun | None, unpadded: dict | None) -> dict:
    run = run or CaseRun("error")  # no run decided: the case could not be built
    out = {
        "case": case["case"]["key"],
        "batch": case.get("batch", {}).get("kind", case["case"].get("batch")),
        "batch_size": case.get("batch", {}).get("batch_size"),
        "spec_info_built_by": case.get("built_by"),
        "idle_input_args": case.get("idle_input_args"),
        "init_args": case.get("init_args"),
        "status": run.status,
        "stopped_at": run.stopped_at,
        "exception": f"{run.exception}: {run.message}" if run.exception else None,
        "raised_at": run.raised_at,
        "library_call": run.library_call,
        "reads": run.reads,
        "answered": run.answered,
        "idle_path": (run.idle_path or {}).get("path"),
        "stand_ins": case.get("stand_ins", []),
    }
    if unpadded is not None:
        last = next(iter(case_runs(unpadded)), None)
        out["unpadded"] = (last.message or last.describe()) if last else unpadded.get("error")
    return out


def decide(f: dict, by_key: dict[str, dict], result: dict, source: Callable[[str], str | None] | None = None) -> dict:
    """One finding with its verdict (see the module docstring)."""
    case = by_key.get(case_key(f))
    unpadded = by_key.get(case_key(f, "IDLE unpadded")) if f["mode"] == "IDLE" else None
    keep = f.get("verdict") if f.get("verdict") == "unreachable" else None
    if case is None:
        why = result.get("message") or "case missing from the replay"
        return _set(f, keep, "unverified", f"no replay ran ({result.get('status')}: {why})", "none", None)
    if case.get("error"):
        where = (case.get("frames") or [{}])[-1].get("at")
        why = f"the replay could not build the {case.get('stage')} ({case['error']}" + (
            f" at {where})" if where else ")"
        )
        return _set(f, keep, "unverified", why, "none", _details(case, None, unpadded))
    verdict, reason, run = judge(f, case, source)
    by = "trace" if case["case"].get("trace") else "replay"
    return _set(f, keep, verdict, reason, by if verdict != "unverified" else "none", _details(case, run, unpadded))


def _set(f: dict, keep: str | None, verdict: str, reason: str, by: str, details: dict | None) -> dict:
    if keep and verdict == "confirmed":  # real code raised at the read: stronger than the static runner paths
        static = {"static_verdict": keep, "static_reason": f.get("verdict_reason")}
        reason = f"{reason} (the static runner paths said {keep}: a real-code confirmation overrides them)"
        return {**f, **static, "verdict": verdict, "verdict_reason": reason, "verdict_by": by, "replay": details}
    if keep:  # the static side's verdict stands; the replay is shown beside it
        return {**f, "replay": details, "replay_verdict": verdict, "replay_reason": reason}
    return {**f, "verdict": verdict, "verdict_reason": reason, "verdict_by": by, "replay": details}


def _what(f: dict, case: dict) -> str:
    c = case["case"]
    batch = case.get("batch") or {}
    path = ""
    idle = next((r.idle_path for r in case_runs(case) if r.idle_path), None)
    if idle and idle.get("path"):
        path = f" through {idle['path']}"
    real = "traced" if c.get("trace") else "real"
    return (
        f"{real} {c['backend_class']}.init_forward_metadata on {case.get('built_by') or f['spec_class']} "
        f"(batch {batch.get('kind', c['batch'])}, bs {batch.get('batch_size')}){path}"
    )


def judge(f: dict, case: dict, source: Callable[[str], str | None] | None = None) -> tuple[str, str, CaseRun | None]:
    """(verdict, reason, the deciding run) of finding `f` from its case's runs."""
    loc, attr = f"{f['read_file']}:{f['read_line']}", f["attr"]
    traced = bool(case["case"].get("trace"))
    what = _what(f, case)
    runs = case_runs(case)
    for i, run in enumerate(runs):
        behind = ""
        if run.answered:
            behind = f" once the earlier crash is answered ({', '.join(run.answered)}: its smallest fix)"
        if run.missing_attr == attr and run.raised_at == loc:
            verdict = "traced: raised" if traced else "confirmed"
            return verdict, f"{what}: raised AttributeError: {run.message} at {_short(loc)}{behind}", run
        split = _split(f, run, source)
        if split is not None:
            verdict = "traced: not read" if traced else "refuted"
            return (
                verdict,
                f"{what}: took the other branch of the `if` at line {split} (it raised {run.exception} at "
                f"{_short(run.raised_at)} there), so the read at {_short(loc)} is not made{behind}",
                run,
            )
        if loc in run.ran and run.raised_at != loc:
            # the read ran on the real instance and did not raise (a traced run: before any library call)
            return "refuted", f"{what}: line {_short(loc)} ran without raising{behind}", run
        status, stop = run.status, run.stopped_at
        if run.missing_attr or (status == "crashed" and i + 1 < len(runs)):
            continue  # an earlier read raised first (or used its None answer): the next run answers it
        if (status, stop) == ("ok", None):
            verdict = "traced: not read" if traced else "refuted"
            tail = ", without calling the stubbed library" if traced else ""
            return verdict, f"{what}: completed{tail} and line {_short(loc)} never ran{behind}", run
        if stop == LIBRARY_CALL and not traced:
            return (
                "unverified",
                f"{what}: reached a library stubbed at import ({run.library_call} at "
                f"{_short(run.raised_at)}) before deciding the read at {_short(loc)}{behind}",
                run,
            )
        if stop == LIBRARY_CALL:
            return (
                "traced: not read",
                f"{what}: reached the GPU library ({run.library_call} at {_short(run.raised_at)}) "
                f"without reading spec_info.{attr} at {_short(loc)}{behind}",
                run,
            )
        if stop == NO_METADATA_CALL:
            return "unverified", f"{what}: {run.message}", run
        return (
            "unverified",
            f"{what}: raised {run.exception}: {run.message} at {_short(run.raised_at)} "
            f"before deciding the read at {_short(loc)}{behind}",
            run,
        )
    return "unverified", f"{what}: {len(runs)} run(s) each raised an earlier AttributeError", runs[-1] if runs else None


def _split(f: dict, run: CaseRun, source: Callable[[str], str | None] | None) -> int | None:
    """The `if` separating the read from where this run raised (``branches.other_branch``)."""
    at = run.raised_at or ""
    if source is None or not run.crashed or f"{f['read_file']}:{f['read_line']}" in run.ran:
        return None
    path, _, line = at.rpartition(":")
    text = source(f["read_file"]) if path == f["read_file"] else None
    return other_branch(text, f["read_line"], int(line)) if text and line.isdigit() else None
