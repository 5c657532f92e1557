"""Robustness recall of the lint, measured by mutation of a release's real sources.

The robustness mutants: their sites and expected findings come from the lint's own analysis, so
they measure how the analyser holds up under rewrites, not what its model leaves out (that is
`replay/oracle.py`: mutants of the independent read sites judged by real code).

Three kinds of mutant, each with the finding it must produce (known by construction from the
release's own reads and installs) and a negative control that must not produce it:

- field removed: for every attribute a backend reads (unguarded) off `spec_info` in a mode, and
  every class installed in that mode that has it, the attribute is removed from the class (its
  field, class-level default or `__init__` assignment, in every class of its MRO that defines
  it). Expected: the finding at each such read. Control: the attribute added back to the class.
- guard removed: a guarded read (`getattr(x, "a", d)`, `hasattr(x, "a")`) made unguarded, for a
  class installed in the read's mode that lacks `a`. Expected: the finding at the read (or the
  reads the `hasattr` guarded). Control: the guard put back (the release as shipped).
- install moved: an install rewritten the ways real code installs (`mutate.MOVES`: returned by a
  function and bound by the caller, returned in a tuple and unpacked, built by a factory two calls
  away, chosen from a dict, a conditional expression, `dataclasses.replace`, `setattr`), with one
  attribute the backends read
  removed from the installed class. Expected: the finding, with the moved install among its
  installs. Control: the attribute added back.

A mutant detected: every expected finding reported. Recall per kind = detected / mutants; a
mutant whose rewrite does not apply is skipped and counted apart.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

from workbench.run.provenance import workbench_commit

from ..context import UpstreamContext
from ..sources.releases import check_versions
from ..sources.trees import SourceTree, release_tree
from .classes import collect, mro
from .lint import SPEC_DIR, _reaches, analyse
from .mutate import MOVES, MutationError, add_attribute, move_install, remove_attribute, remove_guard

KINDS = ("field removed", "guard removed", "install moved")
# The releases whose sources the lint and the mutations were developed against; every other
# release is held out (reported as such).
DEVELOPED_ON = ("0.5.13", "0.5.14", "0.5.23")
_FIELD_HOWS = ("field", "field with default", "class attribute")


@dataclass
class Mutant:
    """A mutant: the files it changes, its control's changes (None: the release itself), what it must find."""

    kind: str
    name: str
    changes: dict[str, str]
    control: dict[str, str] | None
    expect: list[dict] = field(default_factory=list)


def _exposed(analysis: dict) -> list[tuple[dict, dict, str, str]]:
    """(backend, read, class, mode) for every unguarded read of an attribute a class installed in
    that mode has (what a field removal must expose)."""
    out = []
    classes, installs = analysis["spec_inputs"], analysis["installs"]
    modes_of: dict[str, set[str]] = {}
    for i in installs:
        modes_of.setdefault(i["class"], set()).update(i["modes"])
    for be in analysis["backends"].values():
        for r in be["reads"]:
            if r["guarded"]:
                continue
            for cname, cls in classes.items():
                if r["attr"] not in cls["attrs"] or cls["dynamic"] or not _reaches(r, cls):
                    continue
                for m in sorted(modes_of.get(cname, ())):
                    if r["modes"] is None or m in r["modes"]:
                        out.append((be, r, cname, m))
    return out


def _expect(be: dict, r: dict, cname: str, mode: str, lines: list[int], install: tuple | None = None) -> dict:
    return {
        "backend_class": be["class"],
        "read_file": be["file"],
        "read_lines": sorted(set(lines)),
        "mode": mode,
        "spec_class": cname,
        "attr": r["attr"],
        "install": list(install) if install else None,
    }


def _removal(
    tree: SourceTree, cname: str, attr: str, files: dict[str, str], own: dict[str, dict] | None = None
) -> dict[str, str]:
    """`files` (path -> text, starting from the tree's) with `attr` removed from `cname`'s MRO;
    `own`: `collect` of the tree's spec sources with `files`, when the caller has it already."""
    if own is None:
        own = collect({**tree.under(SPEC_DIR), **files})
    out = dict(files)
    hit = False
    for k in mro(cname, own):
        info = own.get(k)
        if info is None or attr not in info["own"]:
            continue
        how = info["own"][attr]["how"]
        if how not in _FIELD_HOWS and not how.startswith(f"self.{attr} in __"):
            raise MutationError(f"{k}.{attr} is a {how}, not a field")
        path = info["file"]
        out[path] = remove_attribute(out.get(path, tree.files[path]), path, k, attr)
        hit = True
    if not hit:
        raise MutationError(f"{cname} has {attr} from no class in the sources")
    return out


def _control(tree: SourceTree, changes: dict[str, str], cname: str, cls: dict, attr: str) -> dict[str, str]:
    path = cls["file"]
    return {**changes, path: add_attribute(changes.get(path, tree.files[path]), path, cname, attr)}


def field_mutants(tree: SourceTree, analysis: dict) -> tuple[list[Mutant], list[str]]:
    """One mutant per (class, attribute) pair some unguarded read exposes."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for be, r, cname, m in _exposed(analysis):
        groups.setdefault((cname, r["attr"]), []).append(_expect(be, r, cname, m, [r["line"]]))
    out, skipped = [], []
    for (cname, attr), expect in sorted(groups.items()):
        name = f"{cname}.{attr} removed"
        try:
            changes = _removal(tree, cname, attr, {})
            control = _control(tree, changes, cname, analysis["spec_inputs"][cname], attr)
        except MutationError as exc:
            skipped.append(f"{name}: {exc}")
            continue
        out.append(Mutant("field removed", name, changes, control, expect))
    return out, skipped


def guard_mutants(tree: SourceTree, analysis: dict) -> tuple[list[Mutant], list[str]]:
    """One mutant per guard (`getattr` default, `hasattr`) that protects a read from an installed class."""
    classes, installs = analysis["spec_inputs"], analysis["installs"]
    out, skipped = [], []
    for be in analysis["backends"].values():
        for g in be["reads"]:
            if g["kind"] not in ("getattr", "hasattr"):
                continue
            if g["kind"] == "getattr":
                lines = [g["line"]]
            else:
                lines = [
                    r["line"]
                    for r in be["reads"]
                    if r["attr"] == g["attr"] and r["function"] == g["function"] and r["guard"] == "guarded"
                ]
            expect = []
            for cname, cls in sorted(classes.items()):
                if g["attr"] in cls["attrs"] or cls["dynamic"] or not _reaches(g, cls):
                    continue
                modes = sorted({m for i in installs if i["class"] == cname for m in i["modes"]})
                expect += [_expect(be, g, cname, m, lines) for m in modes if g["modes"] is None or m in g["modes"]]
            if not expect or not lines:
                continue
            name = f"{be['file'].rsplit('/', 1)[-1]}:{g['line']} {g['kind']}({g['attr']}) unguarded"
            try:
                changes = {be["file"]: remove_guard(tree.files[be["file"]], be["file"], g["line"], g["attr"])}
            except MutationError as exc:
                skipped.append(f"{name}: {exc}")
                continue
            if any(m.name == name for m in out):
                continue
            out.append(Mutant("guard removed", name, changes, None, expect))
    return out, skipped


def move_mutants(tree: SourceTree, analysis: dict) -> tuple[list[Mutant], list[str]]:
    """Every rewrite in `MOVES` of every install site, each with one exposed attribute removed."""
    exposed: dict[str, list[tuple[dict, dict, str]]] = {}
    for be, r, cname, m in _exposed(analysis):
        exposed.setdefault(cname, []).append((be, r, m))
    sites: dict[tuple[str, int, str], set[str]] = {}
    for i in analysis["installs"]:
        sites.setdefault((i["install_file"], i["install_line"], i["class"]), set()).update(i["modes"])
    out, skipped, n = [], [], 0
    for (path, line, cname), modes in sorted(sites.items()):
        cands = [(be, r, m) for be, r, m in exposed.get(cname, []) if m in modes]
        attrs = sorted({r["attr"] for _, r, _ in cands})
        if not attrs:
            continue
        for how in MOVES:
            n += 1
            name = f"{path.rsplit('/', 1)[-1]}:{line} {cname} install {how}"
            try:
                text, new_line = move_install(tree.files[path], path, line, how, n)
                attr, changes = None, None
                for a in attrs:  # the first attribute whose removal applies
                    try:
                        changes = _removal(tree, cname, a, {path: text})
                        attr = a
                        break
                    except MutationError:
                        continue
                if changes is None:
                    raise MutationError(f"no attribute of {cname} can be removed ({', '.join(attrs)})")
                control = _control(tree, changes, cname, analysis["spec_inputs"][cname], attr)
            except MutationError as exc:
                skipped.append(f"{name}: {exc}")
                continue
            expect = [
                _expect(be, r, cname, m, [r["line"]], (path, new_line)) for be, r, m in cands if r["attr"] == attr
            ]
            out.append(Mutant("install moved", f"{name} ({attr} removed)", changes, control, expect))
    return out, skipped


def _hit(e: dict, findings: list[dict]) -> bool:
    for f in findings:
        if (
            f["backend_class"] == e["backend_class"]
            and f["read_file"] == e["read_file"]
            and f["read_line"] in e["read_lines"]
            and f["mode"] == e["mode"]
            and f["spec_class"] == e["spec_class"]
            and f["attr"] == e["attr"]
        ):
            if e["install"] is None or any([i["file"], i["line"]] == e["install"] for i in f["installs"]):
                return True
    return False


def run_mutant(tree: SourceTree, base: dict, m: Mutant) -> dict:
    """Lint the mutant and its control; {detected, control_clean, missed}."""
    found = analyse(tree.with_changes(m.changes, f"{tree.label} [{m.name}]"), paths=False)["findings"]
    missed = [e for e in m.expect if not _hit(e, found)]
    ctrl = base["findings"] if m.control is None else analyse(tree.with_changes(m.control), paths=False)["findings"]
    dirty = [e for e in m.expect if _hit({**e, "install": None}, ctrl)]
    return {"kind": m.kind, "name": m.name, "detected": not missed, "control_clean": not dirty, "missed": missed}


def release_recall(ctx: UpstreamContext, tree: SourceTree) -> dict:
    """Every mutant of one release tree, run; per-kind recall and control results."""
    base = analyse(tree, paths=False)
    mutants: list[Mutant] = []
    skipped: dict[str, list[str]] = {}
    for kind, make in zip(KINDS, (field_mutants, guard_mutants, move_mutants), strict=True):
        made, skip = make(tree, base)
        mutants += made
        skipped[kind] = skip
    ctx.log(
        f"[{tree.label}] {len(mutants)} mutants ({', '.join(f'{k}: {len(s)} skipped' for k, s in skipped.items())})"
    )
    results = []
    for i, m in enumerate(mutants, 1):
        res = run_mutant(tree, base, m)
        results.append(res)
        if not res["detected"] or not res["control_clean"]:
            ctx.log(
                f"[{tree.label}] {i}/{len(mutants)} {m.kind}: {m.name}: "
                f"detected {res['detected']}, control clean {res['control_clean']}"
            )
    kinds = {}
    for kind in KINDS:
        rs = [r for r in results if r["kind"] == kind]
        det, clean = sum(r["detected"] for r in rs), sum(r["control_clean"] for r in rs)
        kinds[kind] = {
            "mutants": len(rs),
            "detected": det,
            "recall": round(det / len(rs), 4) if rs else None,
            "controls": len(rs),
            "controls_clean": clean,
            "skipped": len(skipped[kind]),
        }
    return {
        "source": tree.label,
        "findings_unmutated": len(base["findings"]),
        "mutants": len(results),
        "kinds": kinds,
        "misses": [r for r in results if not r["detected"]],
        "dirty_controls": [r["name"] for r in results if not r["control_clean"]],
        "skipped": skipped,
    }


def recall(ctx: UpstreamContext, versions: list[str], command: str) -> dict:
    """Recall on each release (its sources from the cache); JSON-ready. A release not in
    `DEVELOPED_ON` is marked held out."""

    commit = workbench_commit()  # the code that runs, taken before it runs
    releases = {}
    for v in check_versions(ctx, versions):
        res = release_recall(ctx, release_tree(ctx, v))
        res["held_out"] = v not in DEVELOPED_ON
        releases[v] = res
    return {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "workbench_commit": commit,
        "command": command,
        "developed_on": list(DEVELOPED_ON),
        "releases": releases,
    }


def format_recall(result: dict) -> str:
    """One line per release and kind: mutants, recall, controls clean, skipped."""
    lines = [
        f"{'release':<12} {'held out':<8} {'kind':<14} {'mutants':>7} {'recall':>7} "
        f"{'controls clean':>15} {'skipped':>7}"
    ]
    for v, r in result["releases"].items():
        for kind, k in r["kinds"].items():
            rec = "-" if k["recall"] is None else f"{k['recall']:.3f}"
            lines.append(
                f"{v:<12} {'yes' if r['held_out'] else 'no':<8} {kind:<14} {k['mutants']:>7} {rec:>7} "
                f"{k['controls_clean']:>7}/{k['controls']:<7} {k['skipped']:>7}"
            )
    return "\n".join(lines)
