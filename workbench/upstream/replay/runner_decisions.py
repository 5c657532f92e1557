"""A CUDA-graph runner's replay decision replayed by real code: ``DecodeCudaGraphRunner.can_run_graph``
on the batch a release hands it, the runner built by its real constructor with a STAND-IN for the
graph capture (``wb_driver.graph_runner``: the capture is skipped and recorded; no graph is captured
or replayed).

One scenario, ``dspark-idle``: an idle DP rank of a DSpark server (DP attention, 2 ranks, a MoE
draft model), where the release's ``DraftBlockProposer.run_idle_participation`` builds the draft
IDLE batch by hand and its ``ModelRunner.forward`` asks the decode graph runner ``can_run_graph``.
It decides the corpus case ``dspark-dp-original-global-num-tokens``: ``max(forward_batch.
original_global_num_tokens_cpu)`` in ``can_run_graph``, None on the hand-built draft batch.

Verdicts, per release, about one read (`READ`: file, function, receiver attribute):

- ``confirmed``: the run raised a ``NoneType`` error at the read's line (``raised_at``);
- ``refuted``: ``can_run_graph`` returned (its value recorded) and the read's line ran;
- ``unverified``: anything else (the runner or the proposer could not be built, it raised
  elsewhere, the line never ran, the release has no such read), with the reason.
"""

from __future__ import annotations

import ast

from ..context import UpstreamContext
from ..sources.trees import SourceTree, release_tree
from .front import replay
from .run_end import GRAPH_DECISION, ended

RUNNER_FILE = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
RUNNER_FUNCTION = "DecodeCudaGraphRunner.can_run_graph"
READ_ATTR = "original_global_num_tokens_cpu"
SCENARIO = "dspark-idle"
CORPUS_CASE = "dspark-dp-original-global-num-tokens"
# what the scenario's server runs: DP attention over 2 ranks (MLP TP gather), DSpark speculative decoding
SERVER_ARGS = {
    "enable_dp_attention": True,
    "dp_size": 2,
    "tp_size": 2,
    "speculative_algorithm": "DSPARK",
    "disable_cuda_graph": False,
}
DSPARK_FILE = "sglang/srt/speculative/dspark_components/dspark_draft.py"
FIX_ANCHOR = "forward_batch.global_num_tokens_cpu = gnt"
FIX_LINE = "forward_batch.original_global_num_tokens_cpu = batch.global_num_tokens"
FIX_NOTE = f"{DSPARK_FILE}: _fill_dp_moe_sync_metadata also sets {FIX_LINE!r} (the first line of PR #33098)"
STAND_IN_NOTE = "STAND-IN: DecodeCudaGraphRunner.capture (the real __init__ ran; no CUDA graph captured or replayed)"


def read_lines(tree: SourceTree, file: str = RUNNER_FILE, function: str = RUNNER_FUNCTION, attr: str = READ_ATTR):
    """The lines of `function` (``Class.method``) in `file` that load ``forward_batch.<attr>``."""
    text = tree.get(file)
    if text is None:
        return []
    cname, _, mname = function.partition(".")
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cname:
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and m.name == mname:
                    return sorted(
                        {
                            n.lineno
                            for n in ast.walk(m)
                            if isinstance(n, ast.Attribute)
                            and n.attr == attr
                            and isinstance(n.ctx, ast.Load)
                            and getattr(n.value, "id", None) == "forward_batch"
                        }
                    )
    return []


def judge(case: dict | None, watch: list[str], result: dict, none: bool = True) -> tuple[str, str]:
    """(verdict, reason) of one driver record about the read at the `watch` lines: a None value
    (`none`) is confirmed by a ``NoneType`` error there, an empty one by any error there."""
    if case is None:
        return "unverified", f"no replay ran ({result.get('status')}: {result.get('message')})"
    if case.get("error"):
        return "unverified", f"the replay could not build the {case.get('stage')} ({case['error']})"
    run = (case.get("runs") or [{}])[0]
    where = ", ".join(w.rsplit("/", 1)[-1] for w in watch)
    status, stop = ended(run)
    if status == "crashed":
        msg = f"{run.get('exception')}: {run.get('message')}"
        if run.get("raised_at") in watch and (not none or "NoneType" in str(run.get("message"))):
            return "confirmed", f"{run['path']} raised {msg} at {run['raised_at'].rsplit('/', 1)[-1]}"
        return "unverified", f"{run['path']} raised {msg} at {run.get('raised_at')}, not at {where}"
    if stop == GRAPH_DECISION:
        ran = [w for w in watch if w in (run.get("ran") or [])]
        if ran:
            return "refuted", (
                f"{run['path']}: can_run_graph returned {run.get('can_run_graph')} and "
                f"{', '.join(r.rsplit('/', 1)[-1] for r in ran)} ran without raising"
            )
        return "unverified", f"{run['path']}: can_run_graph returned {run.get('can_run_graph')}; {where} never ran"
    return "unverified", f"{run.get('path')}: {status} ({run.get('message')})"


def graph_replay(ctx: UpstreamContext, target: str | SourceTree, watch: list[str]) -> tuple[dict, dict | None]:
    """(the replay's result, its one case record): the ``dspark-idle`` scenario on `target` (a release
    or an edited tree), recording which of the `watch` lines ran."""
    case = {"graph_runner": True, "scenario": SCENARIO, "key": f"{SCENARIO}|{RUNNER_FUNCTION}", "watch": watch}
    result = replay(ctx, target, [case], extra={"server_args": SERVER_ARGS})
    return result, (result.get("cases") or [None])[0]


def apply_fix(tree: SourceTree) -> SourceTree:
    """`tree` with the fix of PR #33098's first line: ``_fill_dp_moe_sync_metadata`` also sets
    ``forward_batch.original_global_num_tokens_cpu`` from the gathered counts. Raises ValueError when
    the release has no such function or already sets it."""
    text = tree.get(DSPARK_FILE)
    if text is None:
        raise ValueError(f"{tree.label}: no {DSPARK_FILE} to apply the fix to")
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("def _fill_dp_moe_sync_metadata(")), None)
    if start is None or FIX_LINE in text:
        raise ValueError(f"{tree.label}: {DSPARK_FILE} has no _fill_dp_moe_sync_metadata without the fix")
    anchor = next((i for i in range(start, len(lines)) if lines[i].strip() == FIX_ANCHOR), None)
    if anchor is None:
        raise ValueError(f"{tree.label}: {FIX_ANCHOR!r} not found in _fill_dp_moe_sync_metadata")
    indent = lines[anchor][: len(lines[anchor]) - len(lines[anchor].lstrip())]
    lines.insert(anchor + 1, f"{indent}{FIX_LINE}\n")
    return tree.with_changes({DSPARK_FILE: "".join(lines)})


def runner_decision(ctx: UpstreamContext, version: str, fix: bool = False) -> dict:
    """The ``dspark-idle`` replay on one release (with the fix applied when `fix`) and its verdict
    about ``forward_batch.original_global_num_tokens_cpu`` in ``DecodeCudaGraphRunner.can_run_graph``."""
    tree = release_tree(ctx, version)
    lines = read_lines(tree)
    rec: dict = {
        "release": version,
        "fix_applied": FIX_NOTE if fix else None,
        "corpus_case": CORPUS_CASE,
        "scenario": SCENARIO,
        "read": {
            "file": RUNNER_FILE,
            "function": RUNNER_FUNCTION,
            "attr": f"forward_batch.{READ_ATTR}",
            "lines": lines,
        },
        "stand_in": STAND_IN_NOTE,
        "server_args": SERVER_ARGS,
        "replay": None,
    }
    if not lines:
        rec.update(
            verdict="unverified",
            reason=f"{RUNNER_FUNCTION} in {RUNNER_FILE} reads no forward_batch.{READ_ATTR} on {version}",
        )
        return rec
    if fix:
        try:
            tree = apply_fix(tree)
        except ValueError as exc:
            rec.update(verdict="unverified", reason=f"the fix could not be applied: {exc}")
            return rec
    watch = [f"{RUNNER_FILE}:{n}" for n in lines]
    result, record = graph_replay(ctx, tree if fix else version, watch)
    verdict, text = judge(record, watch, result)
    rec["verdict"], rec["reason"] = verdict, f"{text} [{STAND_IN_NOTE}]"
    rec["replay"] = {
        "status": result.get("status"),
        "message": result.get("message"),
        "run_s": result.get("run_s"),
        "env_group": result.get("env_group"),
        "record": record,
    }
    return rec


def format_decision(rec: dict) -> str:
    """One line: the release (``+ fix`` with the fix applied), its verdict and why (naming the stand-in)."""
    return f"sglang {rec['release']}{' + fix' if rec.get('fix_applied') else ''}: {rec['verdict']}: {rec['reason']}"


__all__ = [
    "CORPUS_CASE",
    "RUNNER_FILE",
    "RUNNER_FUNCTION",
    "apply_fix",
    "format_decision",
    "graph_replay",
    "judge",
    "read_lines",
    "runner_decision",
]
