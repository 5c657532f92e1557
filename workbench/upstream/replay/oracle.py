"""Recall of the lint judged by real code: the oracle mutants (`static/site_mutants.py`) replayed.

Per release: the mutants are built from the independent read sites; the runnable ones are sampled
(`site_mutants.sample`, all with `--per-kind 0`); one driver process runs every sampled case on the
release as shipped (the control). The driver imports one source tree per process, so each mutant
runs in its own process: a child forked, `POOL_CHUNK` mutants at a time, from one release
interpreter that has imported the heavy third-party modules once (`oracle_pool`); the child serves
the mutant's edited files in place of the release's, under the release's paths, and imports sglang
afresh (the cache's tree is never touched). The exception is a forward-batch mutant, which edits only
`ForwardBatch.init_new` or `ForwardBatch._pad_inputs_to_size` (the driver never runs the first and
runs the release's own padding: its cases leave the field None on the driver's own batch, before or
after that padding), so all of those run in one process on the release's sources (`shares_process`).

A case of a mutant is judged against the same case on the release (`judge_case`):

- `raised here`: the mutant raised in the site's file (in the metadata, or in the idle runner path
  around it) the error the mutant makes (a missing attribute: an `AttributeError` naming the
  attribute; a None field: a `NoneType` error), and the release did not raise the same there;
- `clean`: the mutant completed (or the idle runner path did not call the metadata), so did the
  release, and the run entered a site's function (the driver records the functions of the site's
  file that ran); for a kind of `SITE_LINE_KINDS` (`none-deref`, `runner-none-deref`), a site line
  ran too, in the mutant's run (the None read without raising) or in the release's (the None turned
  the path away from the read): a case where no site line ran on either does not reach the read
  (`not reached`);
- `not reached`: the same, but no site's function ran: the case says nothing of the mutant;
- `blocked`: anything else (raised elsewhere first, or as the release does; the case could not be
  built; a None field handed to a GPU library stand-in, which cannot say what the library does), with why.

A traced case (a backend whose metadata calls a GPU library) runs with CPU stand-ins for the library
calls (`in_release/stubs.py`): each call is answered by a stub and listed, so a site behind the first
call is reached; a clean verdict there says so.

A mutant is `confirmed` when a case raised here, `refuted` when every case is clean or not reached
and one is clean, `undecided` otherwise (or when it has no case: the reason from `site_mutants`).
The lint reports a mutant when the
lint (`analyse`) or the family (`analyse_family`) of the mutated tree has a finding at a site line of the
mutant's file, for its attribute and spec class (a family finding also by its dereference line).
Recall = confirmed and reported / confirmed; precision = confirmed and reported / reported and
decided. The lint is run on the decided mutants only (an undecided one has `reported` None: neither
figure counts it, and the whole-tree lint is the slowest step). A reported mutant whose every
matching lint finding is `unreachable` is counted apart, with how many of those the oracle confirmed.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Callable
from pathlib import Path

from workbench.run.provenance import workbench_commit

from ..context import UpstreamContext
from ..sources.releases import check_versions
from ..sources.trees import SourceTree, release_tree
from ..static.family import analyse_family
from ..static.lint import MODES_FILE, analyse
from ..static.mutate import MutationError
from ..static.site_mutants import (
    DSPARK_FILE,
    GRAPH_CONTROL_KEY,
    GRAPH_SCENARIO,
    GRAPH_STAND_IN,
    KINDS,
    SITE_LINE_KINDS,
    SiteMutant,
    build_mutants,
    sample,
    set_dspark_idle_none,
)
from .front import replay
from .oracle_pool import replay_mutants
from .run_end import GRAPH_DECISION, LIBRARY_CALL, crashed, describe, ended, stopped_at
from .runner_decisions import FIX_NOTE, apply_fix
from .runner_decisions import SERVER_ARGS as GRAPH_SERVER_ARGS

ORACLE_FIELDS = ("oracle", "oracle_reason", "replay_s", "at_site")  # what the cache keeps of a mutant
POOL_CHUNK = 40  # mutants per release interpreter (`oracle_pool`): the cache is saved after each


def _ended(run: dict) -> str:
    return f"{describe(run)} {run.get('exception') or ''}: {run.get('message') or ''} at {run.get('raised_at')}"


def _idle_raise(run: dict) -> tuple[str, str] | None:
    """(where, message) of an exception the idle runner path raised before or after the metadata."""
    idle = run.get("idle_path") or {}
    if idle.get("error"):
        return idle.get("raised_at") or "", str(idle["error"])
    if idle.get("after_metadata"):
        return idle.get("after_at") or "", str(idle["after_metadata"])
    return None


def _after_decision(case: dict | None) -> tuple[str, str, str | None] | None:
    """(where, message, exception) of what a graph-runner case's `load_batch` raised after a True
    `can_run_graph` (`wb_driver/graph_runner.py` records it apart: the run itself ends at the decision)."""
    after = (case or {}).get("after_decision") or {}
    if after.get("status") != "crashed":
        return None
    return after.get("raised_at") or "", str(after.get("message")), after.get("exception")


def _caused(m: SiteMutant, exception: str | None, msg: str) -> bool:
    """Whether an exception is the one mutant `m` makes: an `AttributeError` naming the attribute
    (field or guard removed) or a `NoneType` error (a field left None)."""
    if m.op in ("field removed", "guard removed"):
        return exception == "AttributeError" and f"'{m.attr}'" in msg
    return "NoneType" in msg  # idle None, padded None


def _new_nones(run: dict, brun: dict | None) -> list[str]:
    """Stand-in library calls of the mutant's run handed a None that the release's run did not."""
    old = set((brun or {}).get("library_passed") or [])
    return [c for c in run.get("library_passed") or [] if "[None:" in c and c not in old]


def judge_case(m: SiteMutant, case: dict | None, base: dict | None) -> tuple[str, str]:
    """(`raised here` | `clean` | `not reached` | `blocked`, why) for one case of mutant `m` against
    the release's. `clean` needs a site's function entered: a case whose run never entered one says
    nothing of the mutant (`not reached`)."""
    if case is None:
        return "blocked", "no record of the case"
    if case.get("error"):
        return "blocked", f"the replay could not build the {case.get('stage')}: {case['error']}"
    run = (case.get("runs") or [{}])[0]
    brun = ((base or {}).get("runs") or [{}])[0] if base and not base.get("error") else None
    batch = case["case"]["batch"]
    files = {s["file"] for s in m.sites}
    funcs = {f"{s['file']}:{s['function']}" for s in m.sites}
    lines = {f"{s['file']}:{s['line']}" for s in m.sites}
    idle = _idle_raise(run)
    if idle is not None and idle[0].rsplit(":", 1)[0] in files and _caused(m, None, idle[1]):
        if brun is None or _idle_raise(brun) != idle:
            return "raised here", f"{batch}: the idle runner path raised {idle[1]} at {idle[0]}"
    after = _after_decision(case)
    if after is not None and after[0].rsplit(":", 1)[0] in files and _caused(m, after[2], after[1]):
        if base is None or _after_decision(base) != after:
            return "raised here", f"{batch}: load_batch (after can_run_graph True) raised {after[1]} at {after[0]}"
    out, stop = ended(run)
    if out == "crashed":
        at = run.get("raised_at") or ""
        msg = str(run.get("message"))
        same = brun is not None and crashed(brun) and brun.get("raised_at") == at
        same = same and brun.get("message") == run.get("message")
        if at.rsplit(":", 1)[0] in files and _caused(m, run.get("exception"), msg) and not same:
            return "raised here", f"{batch}: {run.get('exception')}: {msg} at {at}"
        why = "as the release does" if same else "first"
        return "blocked", f"{batch}: raised {why}: {_ended(run)}"
    if out == "ok" and stop != LIBRARY_CALL:
        if brun is not None and (ended(brun)[0] != "ok" or stopped_at(brun) == LIBRARY_CALL):
            return "blocked", f"{batch}: the release itself ended {_ended(brun)}"
        if m.op in ("idle None", "padded None") and _new_nones(run, brun):
            return "blocked", f"{batch}: None handed to a stand-in: {'; '.join(_new_nones(run, brun))}"
        entered = {e for e in run.get("entered") or [] if any(e == f or e.startswith(f + ".") for f in funcs)}
        if not entered:
            return "not reached", f"{batch}: {describe(run)}, the driver never entered {', '.join(sorted(funcs))}"
        ran = [w for w in run.get("ran") or [] if w in lines]
        text = f"{batch}: {describe(run)}" + (
            f", site line ran ({', '.join(ran)})" if ran else ", site function ran, site line did not"
        )
        if not ran and m.kind in SITE_LINE_KINDS:
            before = [w for w in (brun or {}).get("ran") or [] if w in lines]
            if not before:
                return "not reached", f"{text}, nor on the release: the case does not reach the read"
            text += f" (it ran on the release: {', '.join(before)}; the None turned the path away from the read)"
        if run.get("library_passed"):
            text += f" (after {len(run['library_passed'])} calls answered by CPU stand-ins)"
        if stop == GRAPH_DECISION:
            text += f" (can_run_graph returned {run.get('can_run_graph')})"
        return "clean", text
    if stop == LIBRARY_CALL:
        return "blocked", f"{batch}: reached {run.get('library_call')} first"
    return "blocked", f"{batch}: {_ended(run)}"


def raised_on_site_path(m: SiteMutant, case: dict) -> bool:
    """The stricter judge: whether the case's exception was raised at one of the mutant's site lines,
    or in a callee with a site line on its stack (the driver keeps a raise's last six sglang frames;
    the idle runner path keeps only where it raised)."""
    lines = {f"{s['file']}:{s['line']}" for s in m.sites}
    run = (case.get("runs") or [{}])[0]
    idle = _idle_raise(run)
    if idle is not None and idle[0] in lines:
        return True
    at = {f.get("at") for f in run.get("frames") or []} | {run.get("raised_at")}
    return bool(at & lines)


def verdict(m: SiteMutant, judged: list[tuple[str, str]]) -> tuple[str, str]:
    """The mutant's oracle verdict from its cases: `confirmed` when a case raised here; `refuted` when
    every case is clean or not reached and one is clean; `undecided` otherwise."""
    if not m.cases:
        return "undecided", m.undecided or "no case"
    text = "; ".join(t for _, t in judged)
    outs = [o for o, _ in judged]
    if "raised here" in outs:
        return "confirmed", text
    if "clean" in outs and all(o in ("clean", "not reached") for o in outs):
        return "refuted", text
    return "undecided", text


def lint_report(m: SiteMutant, lint: dict, family: dict) -> dict:
    """Whether the lint or the family of the mutated tree reports `m`, and the lint's verdicts there."""
    lines = {(s["file"], s["line"]) for s in m.sites}
    hits = [
        f
        for f in lint["findings"]
        if f["attr"] == m.attr and f["spec_class"] == m.spec_class and (f["read_file"], f["read_line"]) in lines
    ]
    fam = [
        f
        for f in family["findings"]
        if f["attr"] == m.attr
        and (m.spec_class is None or f["spec_class"] == m.spec_class)
        and ((f["read_file"], f["read_line"]) in lines or (f["read_file"], f["deref_line"]) in lines)
    ]
    verdicts = sorted({str(f.get("verdict")) for f in hits})
    return {
        "reported": bool(hits or fam),
        "by": sorted({"lint"} if hits else set()) + (["family"] if fam else []),
        "lint_verdicts": verdicts,
        "unreachable": bool(hits) and not fam and all(f.get("verdict") == "unreachable" for f in hits),
    }


def _control_key(case: dict) -> str:
    """The key of the release's own run of a mutant's case (a forward-batch mutant's case has its own key)."""
    return case.get("control_key") or case["key"]


def is_graph(m: SiteMutant) -> bool:
    """Whether mutant `m` is judged by the graph-runner replay (its cases run with the scenario's
    server arguments, `runner_decisions.SERVER_ARGS`, each mutant in a process of its own)."""
    return any(c.get("graph_runner") for c in m.cases)


def _graph_control(mutants: list[SiteMutant]) -> dict:
    """The release's own run of the graph-runner scenario, watching every site line of `mutants`."""
    watch = sorted({w for m in mutants for c in m.cases for w in c["watch"]})
    return {
        "graph_runner": True,
        "scenario": GRAPH_SCENARIO,
        "key": GRAPH_CONTROL_KEY,
        "batch": GRAPH_SCENARIO,
        "watch": watch,
        "timeout_s": 120,
    }


def _graph_base(ctx: UpstreamContext, tree: SourceTree, control: dict) -> tuple[SourceTree, str, dict]:
    """(the tree the graph mutants run on, what it is, the control's replay): the release, or, when the
    release itself raises in the scenario before the graph runner decides (0.5.16's own
    `original_global_num_tokens_cpu` None at `can_run_graph`, the corpus case), the release with the fix
    of that crash (`runner_decisions.apply_fix`) where it applies and its control then decides: a
    mutant's site past the release's own crash is reached only so."""
    extra = {"server_args": GRAPH_SERVER_ARGS}
    res = replay(ctx, tree, [control], extra=extra)
    run = ((_case_index(res).get(GRAPH_CONTROL_KEY) or {}).get("runs") or [{}])[0]
    if res["status"] != "ok" or ended(run)[0] != "crashed":
        return tree, "", res
    try:
        fixed = apply_fix(tree)
    except ValueError:
        return tree, "", res
    again = replay(ctx, fixed, [control], extra=extra)
    frun = ((_case_index(again).get(GRAPH_CONTROL_KEY) or {}).get("runs") or [{}])[0]
    if again["status"] != "ok" or ended(frun)[0] == "crashed":
        return tree, "", res
    note = (
        f" (on the release with the fix applied, {FIX_NOTE}: as shipped it raises first, "
        f"{run.get('exception')}: {run.get('message')} at {run.get('raised_at')})"
    )
    return fixed, note, again


def _on_base(m: SiteMutant, base: SourceTree) -> dict[str, str]:
    """Mutant `m`'s edit made on `base` (the release with the fix: the same keyword set to None)."""
    if not base.changes:
        return m.changes
    return {DSPARK_FILE: set_dspark_idle_none(base.files[DSPARK_FILE], DSPARK_FILE, m.attr)}


def shares_process(m: SiteMutant) -> bool:
    """Whether mutant `m` can share one replay process with the others like it: it edits only
    `ForwardBatch.init_new`, which the driver never runs (its cases leave the field None on the
    hand-built batch instead), so its cases run on the release's own sources."""
    return (
        bool(m.cases)
        and set(m.changes) == {MODES_FILE}
        and all(c.get("batch_none") or c.get("batch_none_after") for c in m.cases)
    )


def _for_cases(ctx: UpstreamContext, cases: list[dict]) -> UpstreamContext:
    """`ctx` with a process limit no shorter than its cases' own limits together (each case has its
    alarm, `timeout_s`): a process of all the cases of a release must not end for its size alone."""
    return ctx.replace(timeout_s=max(ctx.timeout_s, 120 + sum(c.get("timeout_s", 60) for c in cases)))


def _case_index(result: dict) -> dict[str, dict]:
    return {c["case"]["key"]: c for c in result.get("cases", [])}


def release_oracle(
    ctx: UpstreamContext,
    tree: SourceTree,
    per_kind: int | None,
    cache: dict[str, dict],
    lint_only: bool = False,
    real_only: bool = False,
    checkpoint: Callable[[], None] | None = None,
    lint: bool = True,
) -> dict:
    """Build, sample, replay and judge the mutants of one release; `cache` maps `release|name|digest`
    to a mutant's stored oracle verdict (`ORACLE_FIELDS`: reused, and filled; `checkpoint` is called
    after each new one). The lint side of every decided mutant is the current lint's, cached or not;
    `lint=False` replays without it (`reported` None: the run only fills the cache)."""
    built = build_mutants(tree)
    mutants: list[SiteMutant] = built["mutants"]
    chosen = sample(mutants, tree.release or tree.label, per_kind, real_only)
    todo = [m for m in chosen if f"{tree.release}|{m.name}|{m.digest()}" not in cache]
    ctx.log(f"[{tree.label}] {len(mutants)} oracle mutants, {len(chosen)} sampled, {len(todo)} not cached")
    base_cases: dict[str, dict] = {}
    base_status, base_ok = None, True
    shared_res: dict = {}
    graph_down: str | None = None  # why the graph-runner scenario's control failed: its mutants are not replayed
    graph_base, graph_note = tree, ""  # the tree the graph mutants run on (the release, or it with the fix)
    if todo and not lint_only:
        # the release as shipped: a case without its mutant's batch fields left None
        bare = {"batch_none": [], "batch_none_after": []}
        want = {
            _control_key(c): {**c, "key": _control_key(c), **bare} for m in todo if not is_graph(m) for c in m.cases
        }
        start = time.perf_counter()
        base = replay(_for_cases(ctx, list(want.values())), tree, list(want.values()))
        base_status = f"{base['status']} ({round(time.perf_counter() - start, 1)} s): {base.get('message')}"
        base_cases = _case_index(base)
        base_ok = base["status"] == "ok"
        ctx.log(f"[{tree.label}] control replay of {len(want)} cases: {base_status}")
        graph = [m for m in todo if is_graph(m)]
        if graph:  # the graph-runner scenario's own control, under its server arguments
            start = time.perf_counter()
            graph_base, graph_note, gres = _graph_base(ctx, tree, _graph_control(graph))
            took = round(time.perf_counter() - start, 1)
            base_cases.update(_case_index(gres))
            if gres["status"] != "ok":
                graph_down = f"the graph-runner scenario did not run on the release itself: {gres.get('message')}"
            ctx.log(f"[{tree.label}] graph-runner control ({GRAPH_STAND_IN}): {gres['status']} ({took} s){graph_note}")
        cache[f"{tree.release}|control replay"] = {"control_replay": base_status, "control_ok": base_ok}
        shared = [m for m in todo if shares_process(m)]
        if shared:
            start = time.perf_counter()
            cases = [c for m in shared for c in m.cases]
            shared_res = replay(_for_cases(ctx, cases), tree, cases)
            took = round(time.perf_counter() - start, 1)
            ctx.log(f"[{tree.label}] forward-batch mutants' {len(shared)} replays in one process: {took} s")
    elif f"{tree.release}|control replay" in cache:  # all cached: the control of the run that replayed them
        last = cache[f"{tree.release}|control replay"]
        base_status, base_ok = f"{last['control_replay']} (the run that filled the cache)", last["control_ok"]
    records = []
    lint_s = 0.0
    # the other mutants run POOL_CHUNK at a time in one release interpreter (`oracle_pool`), a
    # chunk when the loop reaches its first mutant; the cache is saved after each mutant
    pooled = [m for m in todo if not shares_process(m) and not is_graph(m) and not lint_only]
    answers: dict[str, dict] = {}
    for i, m in enumerate(chosen, 1):
        key = f"{tree.release}|{m.name}|{m.digest()}"
        cached = key in cache
        if cached:
            oracle_fields = {k: v for k, v in cache[key].items() if k in ORACLE_FIELDS}
        elif lint_only:
            oracle_fields = {"oracle": "undecided", "oracle_reason": "lint only: not replayed", "replay_s": 0.0}
        else:
            if is_graph(m) and graph_down:
                answers[m.name] = {"status": "error", "cases": [], "run_s": 0.0, "message": graph_down}
            elif is_graph(m):
                label = f"{tree.label} [{m.name}]"
                start = time.perf_counter()
                try:
                    answers[m.name] = replay(
                        ctx,
                        graph_base.with_changes(_on_base(m, graph_base), label),
                        m.cases,
                        extra={"server_args": GRAPH_SERVER_ARGS},
                    )
                except MutationError as exc:
                    answers[m.name] = {"status": "error", "cases": [], "run_s": 0.0, "message": f"{graph_note}: {exc}"}
                ctx.log(f"[{tree.label}] graph-runner replay of {m.name}: {round(time.perf_counter() - start, 1)} s")
            elif not shares_process(m) and m.name not in answers:
                at = pooled.index(m)
                chunk = pooled[at : at + POOL_CHUNK]
                start = time.perf_counter()
                answers.update(replay_mutants(ctx, tree, [(c.name, c.changes, c.cases) for c in chunk], ctx.timeout_s))
                took = round(time.perf_counter() - start, 1)
                ctx.log(f"[{tree.label}] {len(chunk)} mutants replayed in one release interpreter: {took} s")
            res = shared_res if shares_process(m) else answers[m.name]
            got = _case_index(res)
            judged = [judge_case(m, got.get(c["key"]), base_cases.get(_control_key(c))) for c in m.cases]
            if res["status"] != "ok":
                judged.append(("blocked", f"the replay process ended {res['status']}: {res.get('message')}"))
            v, why = verdict(m, judged)
            if is_graph(m):
                why = f"{why}{graph_note} [{GRAPH_STAND_IN}]"
            at_site = None
            if v == "confirmed":
                at_site = any(
                    o == "raised here" and raised_on_site_path(m, got.get(c["key"]) or {})
                    for c, (o, _) in zip(m.cases, judged, strict=False)
                )
            oracle_fields = {"oracle": v, "oracle_reason": why, "replay_s": res.get("run_s"), "at_site": at_site}
        rec = {
            "kind": m.kind,
            "op": m.op,
            "name": m.name,
            "attr": m.attr,
            "spec_class": m.spec_class,
            "sites": [f"{s['file']}:{s['line']} {s['function']}" for s in m.sites],
            "cases": [c["key"] for c in m.cases],
            "at_site": None,
            **oracle_fields,
        }
        if not cached and not lint_only:
            cache[key] = rec
            if checkpoint is not None:
                checkpoint()
        if rec["oracle"] == "undecided" and not lint_only:
            # recall and precision count decided mutants only: the whole-tree lint is not run for the rest
            rep = {"reported": None, "by": [], "lint_verdicts": [], "unreachable": False}
        elif not lint:
            rep = {"reported": None, "by": [], "lint_verdicts": [], "unreachable": False, "lint": "not run"}
        else:
            # the lint side is always the current lint's: a cached entry holds the oracle's verdict alone
            start = time.perf_counter()
            mtree = tree.with_changes(m.changes, f"{tree.label} [{m.name}]")
            report = analyse(mtree)
            rep = lint_report(m, report, analyse_family(mtree, report))
            lint_s += time.perf_counter() - start
        records.append({**rec, **rep, "cached": cached})
        ctx.log(f"[{tree.label}] {i}/{len(chosen)} {m.kind}: {m.name}: {rec['oracle']}, reported {rep['reported']}")
    ctx.log(f"[{tree.label}] the lint and the family of the decided mutants: {round(lint_s, 1)} s")
    return {
        "source": tree.label,
        "control_replay": base_status,
        "control_ok": base_ok,
        "sites": built["sites"],
        "outside_reason": built["outside_reason"],
        "unparsed": built["unparsed"],
        "population": {k: sum(1 for m in mutants if m.kind == k) for k in KINDS},
        "runnable": {k: sum(1 for m in mutants if m.kind == k and m.cases) for k in KINDS},
        "runnable_real": {
            k: sum(1 for m in mutants if m.kind == k and m.cases and not any(c["trace"] for c in m.cases))
            for k in KINDS
        },
        "not_run": {
            k: sorted({m.undecided for m in mutants if m.kind == k and not m.cases and m.undecided}) for k in KINDS
        },
        "skipped": built["skipped"],
        "kinds": figures(records),
        "mutants": records,
    }


def figures(records: list[dict]) -> dict:
    """Per kind: run, confirmed / refuted / undecided, reported, recall, precision, unreachable."""
    out = {}
    for kind in KINDS:
        rs = [r for r in records if r["kind"] == kind]
        conf = [r for r in rs if r["oracle"] == "confirmed"]
        rep = [r for r in rs if r["reported"]]
        rep_dec = [r for r in rep if r["oracle"] != "undecided"]
        hit = [r for r in conf if r["reported"]]
        strict = [r for r in conf if r.get("at_site")]
        unr = [r for r in rs if r["unreachable"]]
        out[kind] = {
            "run": len(rs),
            "confirmed": len(conf),
            "refuted": sum(1 for r in rs if r["oracle"] == "refuted"),
            "undecided": sum(1 for r in rs if r["oracle"] == "undecided"),
            "reported": len(rep),
            "recall": round(len(hit) / len(conf), 3) if conf else None,
            "precision": round(sum(1 for r in rep_dec if r["oracle"] == "confirmed") / len(rep_dec), 3)
            if rep_dec
            else None,
            "unreachable_reported": len(unr),
            "unreachable_confirmed": sum(1 for r in unr if r["oracle"] == "confirmed"),
            "missed": [r["name"] for r in conf if not r["reported"]],
            # the stricter judge (`raised_on_site_path`); None: confirmed before it was recorded
            "confirmed_at_site": len(strict),
            "at_site_unknown": sum(1 for r in conf if r.get("at_site") is None),
            "recall_at_site": round(sum(1 for r in strict if r["reported"]) / len(strict), 3) if strict else None,
        }
    return out


def oracle_recall(
    ctx: UpstreamContext,
    versions: list[str],
    command: str,
    per_kind: int | None,
    previous: Path | None = None,
    real_only: bool = False,
    lint: bool = True,
) -> dict:
    """The oracle recall of every release (`lint`: as `release_oracle`); `previous` (an earlier
    `--json` output) seeds the cache and is rewritten with the cache after each replayed mutant (a run
    stopped early loses none)."""
    commit = workbench_commit()
    cache: dict[str, dict] = {}
    if previous is not None and previous.is_file():
        try:
            cache = dict(json.loads(previous.read_text()).get("cache") or {})
        except ValueError as exc:
            raise ValueError(f"{previous}: not a recall --oracle JSON output ({exc})") from exc
        # an older run's entry may carry its lint's answer: only the oracle's fields are kept
        lint_fields = ("reported", "by", "lint_verdicts", "unreachable", "cached")
        cache = {k: {f: v for f, v in e.items() if f not in lint_fields} for k, e in cache.items()}

    def checkpoint() -> None:  # a run stopped early keeps what it replayed: the next run reuses it
        if previous is not None:
            previous.write_text(json.dumps({"partial": f"cache of an unfinished run: {command}", "cache": cache}))

    releases = {}
    for v in check_versions(ctx, versions):
        releases[v] = release_oracle(
            ctx, release_tree(ctx, v), per_kind, cache, real_only=real_only, checkpoint=checkpoint, lint=lint
        )
    return {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "workbench_commit": commit,
        "command": command,
        "sampling": (
            "all runnable mutants"
            if per_kind is None
            else f"per release and kind, the first {per_kind} runnable mutants by sha256('release|mutant name')"
        )
        + (" whose cases all run real backends (triton, torch_native), not traced" if real_only else ""),
        "releases": releases,
        "cache": cache,
    }


def format_oracle(result: dict) -> str:
    """One line per release and kind."""
    head = (
        f"{'release':<8} {'kind':<18} {'sites':>5} {'mutants':>7} {'runnable':>8} {'run':>4} {'conf':>4} "
        f"{'ref':>4} {'undec':>5} {'recall':>6} {'prec':>5} {'unreach':>9}"
    )
    lines = [head]
    for v, r in result["releases"].items():
        for kind, k in r["kinds"].items():
            rec = "-" if k["recall"] is None else f"{k['recall']:.3f}"
            pre = "-" if k["precision"] is None else f"{k['precision']:.3f}"
            unr = f"{k['unreachable_confirmed']}/{k['unreachable_reported']}"
            lines.append(
                f"{v:<8} {kind:<18} {r['sites'][kind]:>5} {r['population'][kind]:>7} {r['runnable'][kind]:>8} "
                f"{k['run']:>4} {k['confirmed']:>4} {k['refuted']:>4} {k['undecided']:>5} {rec:>6} {pre:>5} {unr:>9}"
            )
    return "\n".join(lines)
