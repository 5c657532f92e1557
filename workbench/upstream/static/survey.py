"""The kv_indptr survey: a query over the lint of each release, as a release x fact table.

For one field (`kv_indptr`): which spec-input classes have it, how each attention backend's
`init_forward_metadata` path reads `spec_info.<field>` (plain, a None check, getattr with a
default, hasattr), and which worker builds the `EagleDraftExtendInput` it installs. Everything
comes from `lint.analyse` of the release's sources; nothing is scanned twice.
"""

from __future__ import annotations

import datetime as _dt

from workbench.run.provenance import workbench_commit

from ..context import UpstreamContext
from ..sources.releases import check_versions, default_versions
from ..sources.trees import SourceTree, release_tree
from .lint import ATTN_DIR, SPEC_DIR, analyse

FIELD = "kv_indptr"
REGRESSED_CLASS = "EagleDraftExtendInput"
BACKEND_FILES: dict[str, str] = {
    "triton": "triton_backend.py",
    "flashinfer": "flashinfer_backend.py",
    "flashinfer_mla": "flashinfer_mla_backend.py",
    "aiter": "aiter_backend.py",
    "wave": "wave_backend.py",
    "fa3": "flashattention_backend.py",
}
WORKER_FILES: dict[str, str] = {"V1": "eagle_worker.py", "V2": "eagle_worker_v2.py"}
_WORKER_FACT = "{fname} ({label}) draft-extend uses " + REGRESSED_CLASS
SAFE_KINDS = frozenset({"getattr", "hasattr"})
# Severity of a table cell: -1 not applicable, 0 fine, 1 a risk, 2 the regression itself.
NA, FINE, RISK, BUG = -1, 0, 1, 2


def survey_release(analysis: dict, tree: SourceTree, field: str = FIELD) -> dict:
    """One release's survey, read off its lint analysis: spec_inputs, backends, workers, facts."""
    classes = {
        name: {
            "file": c["file"],
            "line": c["line"],
            "has_field": field in c["attrs"],
            "field_from": c["attrs"].get(field, {}).get("class"),
            "declaration": c["attrs"].get(field),
        }
        for name, c in analysis["spec_inputs"].items()
    }
    backends: dict[str, dict] = {}
    for be in analysis["backends"].values():
        fname = be["file"][len(ATTN_DIR) :]
        reads = [r for r in be["reads"] if r["attr"] == field]
        entry = backends.setdefault(fname, {"present": True, "accesses": []})
        entry["accesses"] += [
            {k: r[k] for k in ("line", "kind", "function", "code", "guarded", "modes")} for r in reads
        ]
    for name in BACKEND_FILES.values():
        if tree.get(ATTN_DIR + name) is not None:
            backends.setdefault(name, {"present": True, "accesses": []})
    for entry in backends.values():
        acc = sorted({(a["line"], a["kind"]): a for a in entry["accesses"]}.values(), key=lambda a: a["line"])
        entry.update(
            accesses=acc,
            reads=bool(acc),
            kinds=sorted({a["kind"] for a in acc}),
            read_lines=sorted({a["line"] for a in acc}),
            unsafe_reads=sum(1 for a in acc if a["kind"] not in SAFE_KINDS),
        )
    workers: dict[str, dict] = {}
    for inst in analysis["installs"]:
        # the worker is the file that installs the spec input on the batch; the class may be built
        # elsewhere (0.5.12's V1 worker installs `EagleDraftExtendInput.create_idle_input(...)`, built in
        # eagle_info.py)
        where = inst.get("install_file") or inst["built_at"].rsplit(":", 1)[0]
        if inst["class"] == REGRESSED_CLASS and where.startswith(SPEC_DIR):
            w = workers.setdefault(where[len(SPEC_DIR) :], {"draft_extend_spec_info": [], "installs": []})
            w["installs"].append(inst)
            w["draft_extend_spec_info"] = [REGRESSED_CLASS]
    out = {"spec_inputs": classes, "backends": dict(sorted(backends.items())), "workers": workers}
    out["facts"] = derive_facts(out, {w for w in WORKER_FILES.values() if tree.get(SPEC_DIR + w) is not None})
    return out


def _yes_no(flag: bool, bad_when: bool | None = None) -> dict:
    return {"text": "yes" if flag else "no", "severity": FINE if bad_when is None or flag != bad_when else BUG}


def derive_facts(rel: dict, worker_files: set[str]) -> dict[str, dict]:
    """The release x fact table row for one release: {fact: {"text", "severity"}}."""
    classes, backends, workers = rel["spec_inputs"], rel["backends"], rel["workers"]
    facts: dict[str, dict] = {}
    cls = classes.get(REGRESSED_CLASS)
    facts[f"{REGRESSED_CLASS} defined"] = _yes_no(cls is not None)
    facts[f"{REGRESSED_CLASS} has {FIELD}"] = (
        {"text": "–", "severity": NA} if cls is None else _yes_no(cls["has_field"], bad_when=False)
    )
    draft = classes.get("EagleDraftInput")
    facts[f"EagleDraftInput has {FIELD}"] = (
        {"text": "–", "severity": NA} if draft is None else _yes_no(draft["has_field"], False)
    )
    for name, fname in BACKEND_FILES.items():
        info = backends.get(fname)
        if info is None:
            cell = {"text": "absent", "severity": NA}
        elif not info["reads"]:
            cell = {"text": "no", "severity": FINE}
        else:
            cell = {
                "text": "+".join(k.replace("none_check", "guard") for k in info["kinds"]),
                "severity": RISK if info["unsafe_reads"] else FINE,
            }
        facts[f"{name} reads spec_info.{FIELD}"] = cell
    lacks = cls is not None and not cls["has_field"]
    for label, fname in WORKER_FILES.items():
        fact = _WORKER_FACT.format(fname=fname, label=label)
        if fname not in worker_files:
            facts[fact] = {"text": "absent", "severity": NA}
            continue
        installs = fname in workers
        facts[fact] = {"text": "yes" if installs else "no", "severity": BUG if installs and lacks else FINE}
    facts[f"regressed class shipped (no {FIELD})"] = {
        "text": "yes" if lacks else "no",
        "severity": BUG if lacks else FINE,
    }
    return facts


def survey(ctx: UpstreamContext, versions: list[str] | None = None) -> dict:
    """The survey of each release (default 0.5.11-0.5.14 and the newest); JSON-ready."""
    versions = check_versions(ctx, versions) if versions else default_versions(ctx)
    releases = {}
    for version in versions:
        tree = release_tree(ctx, version)
        ctx.log(f"[sglang-{version}] surveying {tree.root}")
        releases[version] = survey_release(analyse(tree), tree)
    fact_names = list(next(iter(releases.values()))["facts"]) if releases else []
    return {
        "package": "sglang",
        "field": FIELD,
        "versions": versions,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "workbench_commit": workbench_commit(),
        "fact_names": fact_names,
        "releases": releases,
    }


def format_table(result: dict) -> str:
    """A plain-text release x fact table."""
    versions = result["versions"]
    rows = [(name, [result["releases"][v]["facts"][name]["text"] for v in versions]) for name in result["fact_names"]]
    width = max([len("fact")] + [len(n) for n, _ in rows])
    cols = [max(len(v), *(len(r[1][i]) for r in rows)) for i, v in enumerate(versions)]
    line = "  ".join(["fact".ljust(width)] + [v.ljust(c) for v, c in zip(versions, cols, strict=False)])
    out = [line, "-" * len(line)]
    for name, cells in rows:
        out.append("  ".join([name.ljust(width)] + [t.ljust(c) for t, c in zip(cells, cols, strict=False)]))
    return "\n".join(out)


def format_details(result: dict) -> str:
    """Line-level detail: where each backend reads the field, and each class's declaration."""
    out = []
    for version in result["versions"]:
        rel = result["releases"][version]
        out.append(f"sglang {version}")
        for name, info in rel["spec_inputs"].items():
            decl = info["declaration"]
            where = f"{info['field_from']} line {decl['line']}" if decl else "missing"
            out.append(f"  class {name} ({info['file']}:{info['line']}): {FIELD} {where}")
        for fname, info in rel["backends"].items():
            for acc in info["accesses"]:
                out.append(f"  {fname}:{acc['line']} {acc['kind']:<10} {acc['function']}: {acc['code']}")
        for fname, info in rel["workers"].items():
            for rec in info["installs"]:
                out.append(
                    f"  {fname} builds {rec['class']}.{rec['how']}, installed at "
                    f"{rec['install_file']}:{rec['install_line']} ({', '.join(rec['modes'])})"
                )
    return "\n".join(out)
