"""Real-code verdicts for the family findings (`static/family.py`), by the same replay driver.

A `none-deref` / `batch-none-deref` finding is replayed as the contract lint's IDLE findings are:
the backend's real `init_forward_metadata` on the release's padded IDLE batch (and the unpadded one,
through the release's own idle runner path), `spec_info` built by the release's `create_idle_input`
(a `batch-none-deref` finding: by the first spec input with an idle constructor the release
installs in IDLE, named in `replay.spec_info_built_by`). One run per case: nothing is answered.

- `confirmed` (`traced: raised` for a traced backend): the run raised at the finding's dereference
  line, a `NoneType` error for a None value, any error for an empty one;
- `refuted` (`traced: not read`): the line ran without raising, or never ran, on every batch the
  runner gives the metadata;
- `unverified`: the replay could not decide (it raised elsewhere first, no case ran).

A `runner-none-deref` finding in `DecodeCudaGraphRunner.can_run_graph` is judged by the graph-runner
replay (`runner_decisions`: the runner built by its real constructor with a STAND-IN for the graph
capture, asked by a DSpark idle DP rank's draft batch), one run for all of them: `confirmed` when it
raised at the dereference line, `refuted` when `can_run_graph` returned and the line ran, else
`unverified`. Every other runner finding is `unverified`: no replay runs its method.
"""

from __future__ import annotations

from ..context import UpstreamContext
from ..sources.trees import SourceTree
from .cases import case_key, plan
from .front import replay
from .run_end import LIBRARY_CALL, NO_METADATA_CALL, describe, ended
from .runner_decisions import RUNNER_FILE, RUNNER_FUNCTION, STAND_IN_NOTE, graph_replay, judge

RUNNER_REASON = (
    "not replayed: the replay driver runs an attention backend's init_forward_metadata, not a runner's methods; "
    f"the graph-runner replay runs {RUNNER_FUNCTION} only"
)


def _graph_judged(f: dict) -> bool:
    return f["kind"] == "runner-none-deref" and f["read_file"] == RUNNER_FILE and f["read_function"] == RUNNER_FUNCTION


def runner_verdicts(ctx: UpstreamContext, tree: SourceTree, findings: list[dict]) -> dict[int, dict]:
    """{index: verdict fields} for the findings in `DecodeCudaGraphRunner.can_run_graph`, by one
    graph-runner replay on `tree` (a release or an edited tree) watching their dereference lines."""
    todo = {i: f for i, f in enumerate(findings) if _graph_judged(f)}
    if not todo:
        return {}
    lines = sorted({f"{f['read_file']}:{f['deref_line']}" for f in todo.values()})
    result, record = graph_replay(ctx, tree, lines)
    out = {}
    for i, f in todo.items():
        verdict, text = judge(record, [f"{f['read_file']}:{f['deref_line']}"], result, f["idle_value"] == "None")
        out[i] = {
            "verdict": verdict,
            "verdict_reason": f"real {RUNNER_FUNCTION} ({STAND_IN_NOTE}): {text}",
            "verdict_by": "none" if verdict == "unverified" else "replay",
            "replay": {"cases": [(record or {}).get("case", {}).get("key")], "stand_in": STAND_IN_NOTE},
        }
    return out


def _as_case_finding(f: dict, spec_for_batch: tuple[str, str] | None) -> dict | None:
    g = {**f, "read_line": f["deref_line"]}
    if f["kind"] == "batch-none-deref":
        if spec_for_batch is None:
            return None
        g["spec_class"], g["spec_class_file"] = spec_for_batch
    return g


def _judge_run(f: dict, case: dict) -> tuple[str, str]:
    """(what it showed, text) of one case for finding `f`: raised here / ran / never ran / elsewhere / not called."""
    loc = f"{f['read_file']}:{f['deref_line']}"
    if case.get("error"):
        return "error", f"the replay could not build the {case.get('stage')} ({case['error']})"
    run = (case.get("runs") or [{}])[0]
    kind = (case.get("batch") or {}).get("kind", case["case"]["batch"])
    msg = f"{run.get('exception')}: {run.get('message')}"
    status, stop = ended(run)
    if status == "crashed" and run.get("raised_at") == loc:
        if f["idle_value"] == "None" and "NoneType" not in str(run.get("message")):
            return "elsewhere", f"{kind}: raised {msg} at {loc}, not on a None value"
        return "raised", f"{kind}: raised {msg} at {loc.rsplit('/', 1)[-1]}"
    if stop == NO_METADATA_CALL:
        return "not called", f"{kind}: {run.get('message')}"
    if loc in (run.get("ran") or []):
        return "ran", f"{kind}: line {loc.rsplit('/', 1)[-1]} ran without raising"
    if (status, stop) == ("ok", None):
        return "never", f"{kind}: completed and line {loc.rsplit('/', 1)[-1]} never ran"
    if stop == LIBRARY_CALL:
        return "library", f"{kind}: reached {run.get('library_call')} before line {loc.rsplit('/', 1)[-1]}"
    return "elsewhere", f"{kind}: {describe(run)} {msg} at {run.get('raised_at')} before deciding line {loc}"


def family_verdicts(ctx: UpstreamContext, tree: SourceTree, family: dict) -> tuple[list[dict], dict]:
    """(the family findings with `verdict`, `verdict_reason`, `verdict_by`, `replay`; a run summary)."""
    findings = family["findings"]
    installed = sorted(family["spec_idle_values"])
    spec_for_batch = None
    if installed:
        first = installed[0]
        spec_for_batch = (first, family["spec_classes_files"][first])
    by_runner = runner_verdicts(ctx, tree, findings)
    todo = {i: _as_case_finding(f, spec_for_batch) for i, f in enumerate(findings) if f["kind"] != "runner-none-deref"}
    todo = {i: g for i, g in todo.items() if g is not None}
    cases = plan(list(todo.values()))
    for c in cases:
        c["answer_missing"] = False
    result = replay(ctx, tree, cases) if cases else {"status": "ok", "cases": [], "run_s": 0.0}
    by_key = {c["case"]["key"]: c for c in result["cases"]}
    out = []
    for i, f in enumerate(findings):
        if i in by_runner:
            out.append({**f, **by_runner[i]})
            continue
        if i not in todo:
            reason = RUNNER_REASON if f["kind"] == "runner-none-deref" else "no spec input to build the IDLE batch with"
            out.append({**f, "verdict": "unverified", "verdict_reason": reason, "verdict_by": "none", "replay": None})
            continue
        g = todo[i]
        traced = g["backend"] not in ("triton", "torch_native")
        judged = []
        for kind in ("IDLE padded", "IDLE unpadded"):
            case = by_key.get(case_key(g, kind))
            judged.append(
                ("error", f"{kind}: no replay ran ({result.get('status')}: {result.get('message')})")
                if case is None
                else _judge_run(f, case)
            )
        shown = [o for o, _ in judged]
        text = "; ".join(t for _, t in judged)
        if "raised" in shown:
            verdict = "traced: raised" if traced else "confirmed"
        elif all(o in ("ran", "never", "not called", "library") for o in shown) and "not called" != shown[0]:
            verdict = "traced: not read" if traced else "refuted"
        else:
            verdict = "unverified"
        what = (
            f"{'traced' if traced else 'real'} {g['backend_class']}.init_forward_metadata, spec_info {g['spec_class']}"
        )
        out.append(
            {
                **f,
                "verdict": verdict,
                "verdict_reason": f"{what}: {text}",
                "verdict_by": "none" if verdict == "unverified" else ("trace" if traced else "replay"),
                "replay": {
                    "cases": [case_key(g, k) for k in ("IDLE padded", "IDLE unpadded")],
                    "spec_info": g["spec_class"],
                },
            }
        )
    counts: dict[str, int] = {}
    for f in out:
        counts[f["verdict"]] = counts.get(f["verdict"], 0) + 1
    summary = {"status": result.get("status"), "cases": len(cases), "run_s": result.get("run_s"), "verdicts": counts}
    summary["graph_runner_findings"] = len(by_runner)
    return out, summary


def _e2e_at(rec: dict, f: dict) -> bool:
    c = rec.get("crash") or {}
    at = c.get("raised_at") or {}
    none_msg = "'NoneType' object" in (c.get("message") or "")
    return (
        (none_msg or f["idle_value"] != "None")
        and (at.get("file") or "").endswith(f["read_file"].split("sglang/", 1)[-1])
        and str(at.get("line")) == str(f["deref_line"])
    )


def family_end_to_end(ctx: UpstreamContext, tree: SourceTree, findings: list[dict]) -> tuple[list[dict], dict]:
    """Every `confirmed` family finding the real runtime can drive (a CPU backend, a spec input an
    EAGLE pass installs on the idle rank), run on the release's own runtime at DP 2 with rank 1 idle:
    with the overlap (V2) worker, then, when the release has one, the V1 worker
    (`--disable-overlap-schedule`). `end_to_end`: `confirmed end to end` when a run raised at the
    finding's dereference line (a `NoneType` error for a None value), else `not reached` / `raised
    elsewhere` / `undecided`, with each run's command. Runs are shared between findings."""
    # the real runtime loads only when end-to-end runs are asked for
    from ..runtime.e2e import DEPLOYMENT, PHASE_OF, V1_WORKER, _command
    from ..runtime.release_run import BACKENDS, run_runtime

    records: dict[tuple, dict] = {}
    out = []
    for f in findings:
        if f.get("verdict") != "confirmed":
            out.append({**f, "end_to_end": None})
            continue
        if f["backend"] not in BACKENDS or f["spec_class"] not in PHASE_OF:
            why = (
                f"backend {f['backend']} / {f['spec_class']} is outside the lane "
                f"({', '.join(BACKENDS)}; {', '.join(PHASE_OF)})"
            )
            out.append({**f, "end_to_end": {"verdict": "not drivable", "reason": why, "runs": []}})
            continue
        runs, verdict, reason = [], "not reached", None
        for v1 in [False] + ([True] if tree.get(V1_WORKER) else []):
            key = (f["backend"], v1)
            if key not in records:
                records[key] = run_runtime(
                    ctx,
                    tree.release,
                    dp=2,
                    backend=f["backend"],
                    reference=False,
                    max_new_tokens=8,
                    disable_overlap_schedule=v1,
                )
            rec = records[key]
            c = rec.get("crash") or {}
            at = c.get("raised_at") or {}
            cmd = _command(tree.release, None, f["backend"], [], v1)
            runs.append(
                {
                    "command": cmd,
                    "status": rec["status"],
                    "crash": f"{c.get('exception_type')}: {c.get('message')} at {at.get('file')}:{at.get('line')}"
                    if c
                    else None,
                }
            )
            if rec["status"] in ("error", "timeout") or rec.get("limits"):
                verdict, reason = "undecided", f"{cmd} ended {rec['status']}: {'; '.join(rec.get('limits') or [])}"
                continue
            if _e2e_at(rec, f):
                verdict = "confirmed end to end"
                reason = (
                    f"{cmd}: rank {c.get('rank')} raised {c.get('exception_type')}: {c.get('message')} in the "
                    f"{c.get('phase')} pass ({c.get('forward_mode')}, batch size {c.get('batch_size')}) at "
                    f"{f['read_file'].rsplit('/', 1)[-1]}:{f['deref_line']}"
                )
                break
            if c:
                verdict, reason = "raised elsewhere", runs[-1]["crash"]
        g = {
            **f,
            "end_to_end": {
                "verdict": verdict,
                "reason": reason or "every run completed",
                "runs": runs,
                "deployment": DEPLOYMENT,
            },
        }
        if verdict == "confirmed end to end":
            g.update(verdict=verdict, verdict_by="real runtime")
        out.append(g)
    counts: dict[str, int] = {}
    for f in out:
        if f["end_to_end"]:
            counts[f["end_to_end"]["verdict"]] = counts.get(f["end_to_end"]["verdict"], 0) + 1
    status = "error" if counts.get("undecided") else "ok"
    return out, {"status": status, "runs": len(records), "verdicts": counts}
