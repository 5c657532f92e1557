"""The contract lint over real SGLang sources: backend reads x installed spec inputs -> findings.

A finding is a read of `spec_info.<attr>` reachable from an attention backend's
`init_forward_metadata` in forward mode M, not guarded for class C, where a speculative worker
installs C as `spec_info` in mode M and C's instances lack `<attr>`. Sources are read with `ast`
from a `SourceTree` (a release's unpacked wheel, a checkout, text in memory), never imported.
The finding's JSON shape is documented in docs/upstream-guard.md.
"""

from __future__ import annotations

import ast

from ..sources.trees import SourceTree
from .classes import spec_input_classes
from .finding import AnyFinding
from .flow import Program
from .installs import scan_installs
from .modes import parse_forward_modes
from .program import parse_error
from .reach import ReleaseFacts, reachability
from .reads import backend_reads
from .runners import Runners

SPEC_DIR = "sglang/srt/speculative/"
ATTN_DIR = "sglang/srt/layers/attention/"
MODES_FILE = "sglang/srt/model_executor/forward_batch_info.py"
# Where installs and runner paths are looked for besides SPEC_DIR and RUNNER_DIR: the files of
# these folders that mention spec_info or a worker's forward.
FLOW_DIRS = ("sglang/srt/managers/", "sglang/srt/disaggregation/")
RUNNER_DIR = "sglang/srt/model_executor/"


def flow_files(tree: SourceTree) -> dict[str, str]:
    """The files the install and runner-path analysis reads: speculative/, model_executor/, and the
    manager and disaggregation files that mention `spec_info` or `forward_batch_generation`."""
    out = {**tree.under(SPEC_DIR), **tree.under(RUNNER_DIR)}
    for d in FLOW_DIRS:
        out.update({p: t for p, t in tree.under(d).items() if "spec_info" in t or "forward_batch_generation" in t})
    return out


def backend_name(fname: str) -> str:
    """`sglang/srt/layers/attention/triton_backend.py` -> `triton`."""
    stem = fname.rsplit("/", 1)[-1][:-3]
    return stem[: -len("_backend")] if stem.endswith("_backend") else stem


def _reaches(read: dict, cls: dict) -> bool:
    for kind, what, truth in read["only"]:
        if kind == "isinstance":
            if (any(w in cls["mro"] for w in what)) != truth:
                return False
        elif kind == "pred" and what in cls["type_predicates"]:
            if cls["type_predicates"][what] != truth:
                return False
        elif kind == "type" and cls.get("input_type"):
            if not any((t in what) == truth for t in cls["input_type"]):
                return False
    return True


def finding_key(f: dict) -> str:
    """The triage-file key of a finding: backend|mode|class|attribute|reading function (no lines)."""
    return f"{f['backend']}|{f['mode']}|{f['spec_class']}|{f['attr']}|{f['read_function']}"


def _finding(tree: SourceTree, be: dict, read: dict, mode: str, cname: str, cls: dict, at: list[dict]) -> dict:
    first = at[0]
    f = {
        "source": tree.label,
        "release": tree.release,
        "backend": be["backend"],
        "backend_class": be["class"],
        "backend_file": be["file"],
        "mode": mode,
        "spec_class": cname,
        "spec_class_file": cls["file"],
        "spec_class_line": cls["line"],
        "attr": read["attr"],
        "read_file": read["file"],
        "read_line": read["line"],
        "read_code": read["code"],
        "read_function": read["function"],
        "install_file": first["install_file"],
        "install_line": first["install_line"],
        "install_function": first["install_function"],
        "install_kind": first["kind"],
        "installs": [
            {
                "file": i["install_file"],
                "line": i["install_line"],
                "function": i["install_function"],
                "kind": i["kind"],
                "mode_from": i["mode_from"],
                "batch": i.get("batch"),
            }
            for i in at
        ],
        "set_later": None,
        "runner_paths": [],
        "verdict": None,
        "verdict_reason": None,
        "verdict_by": None,
        "reachability": None,
    }
    later = cls["set_later"].get(read["attr"])
    if later:
        f["set_later"] = f"{later['how']} at {later['file']}:{later['line']}"
    f["key"] = finding_key(f)
    return f


def runner_paths(tree: SourceTree, program: Program, fm, findings: list[dict]) -> list[dict]:
    """Fill each finding's `runner_paths` (where each of its installs' batches goes in its mode),
    its `reachability` (reach.py) when one reaches a metadata site, and its `unreachable` verdict
    when none does (static; see runners.py)."""
    runners = Runners(program, fm)
    funcs = {(f.file, f.qualname): f for f in program.funcs}
    facts = ReleaseFacts(tree)
    sites = [{k: v for k, v in s.items() if k != "_fn"} for s in runners.sites]

    def conds_of(step: dict) -> list[str]:
        fn = funcs.get((step["file"], step.get("function")))
        node = next((n for n in fn.nodes if isinstance(n, ast.Call) and n.lineno == step["line"]), None) if fn else None
        return list(runners.br(fn).conds.get(id(node), ())) if node is not None else []

    memo: dict[tuple, dict] = {}
    for f in findings:
        paths = []
        for i in f["installs"]:
            fn = funcs.get((i["file"], i["function"]))
            key = (i["file"], i["line"], f["mode"])
            if key not in memo:
                memo[key] = (
                    runners.install_paths(fn, i["line"], i.get("batch"), f["mode"])
                    if fn is not None
                    else {"fate": "escapes", "at": {"file": i["file"], "line": i["line"]}}
                )
            paths.append({"install": f"{i['file']}:{i['line']}", **memo[key]})
        f["runner_paths"] = paths
        f["reachability"] = reachability(f, facts, conds_of)
        if paths and all(p["fate"] in ("killed", "graph", "dropped") for p in paths):
            f["verdict"], f["verdict_by"] = "unreachable", "runner paths"
            idle = " (an IDLE batch exists only under DP attention: its DP-attention branches are taken)"
            f["verdict_reason"] = (
                f"no runner path hands it to init_forward_metadata in {f['mode']} from any install the lint found: "
                + "; ".join(_why_not(p) for p in paths)
                + (idle if f["mode"] == "IDLE" else "")
            )
    return sites


def _why_not(p: dict) -> str:
    at = p["at"]
    where = f"{at.get('function', '?')} ({at['file'].rsplit('/', 1)[-1]}:{at['line']})"
    return {
        "killed": f"the batch installed at {p['install'].rsplit('/', 1)[-1]} gets another spec_info in {where} first",
        "graph": f"the batch installed at {p['install'].rsplit('/', 1)[-1]} goes only to CUDA-graph metadata "
        f"({at.get('call', 'a graph runner')}) in {where}",
        "dropped": f"the batch installed at {p['install'].rsplit('/', 1)[-1]} is not forwarded by {where}",
    }[p["fate"]]


def analyse(tree: SourceTree, paths: bool = True) -> dict:
    """Backends, spec-input classes, installs and findings of one source tree.

    `paths`: also the runner paths, reachability and `unreachable` verdicts (the recall run, which
    only counts findings, leaves them out). `unparsed`: every file of the covered set (attention
    backends, speculative/, the runner, manager and disaggregation files the flow reads, ForwardMode's
    file) that does not parse, with why; `gate.ran_problems` makes each one exit 2."""
    modes_src = tree.get(MODES_FILE)
    fm = parse_forward_modes(modes_src) if modes_src and not parse_error(MODES_FILE, modes_src) else None
    members = fm.members if fm else []
    spec = tree.under(SPEC_DIR)
    classes = spec_input_classes(spec)
    program = Program(flow_files(tree), classes)
    installs = scan_installs(program, members)
    covered = {**tree.under(ATTN_DIR), **flow_files(tree), **spec, **({MODES_FILE: modes_src} if modes_src else {})}
    unparsed = [{"file": p, "error": why} for p, t in sorted(covered.items()) if (why := parse_error(p, t))]
    backends: dict[str, dict] = {}
    for fname, text in sorted(tree.under(ATTN_DIR).items()):
        if parse_error(fname, text):
            continue  # listed in `unparsed`: the gate fails closed on it (exit 2)
        per_class = backend_reads(fname, text, fm)
        for bcls, reads in per_class.items():
            backends[f"{fname}:{bcls}"] = {"backend": backend_name(fname), "file": fname, "class": bcls, "reads": reads}
    findings = []
    for be in backends.values():
        for read in be["reads"]:
            if read["guarded"]:
                continue
            for cname, cls in classes.items():
                if read["attr"] in cls["attrs"] or cls["dynamic"] or not _reaches(read, cls):
                    continue
                mine = [i for i in installs if i["class"] == cname]
                for mode in sorted({m for i in mine for m in i["modes"]}):
                    if read["modes"] is not None and mode not in read["modes"]:
                        continue
                    at = [i for i in mine if mode in i["modes"]]
                    findings.append(_finding(tree, be, read, mode, cname, cls, at))
    sites = runner_paths(tree, program, fm, findings) if paths else []
    unique = {
        (f["backend_class"], f["mode"], f["spec_class"], f["attr"], f["read_file"], f["read_line"]): f for f in findings
    }
    findings = sorted(
        unique.values(), key=lambda f: (f["backend"], f["read_file"], f["read_line"], f["mode"], f["spec_class"])
    )
    return {
        "source": tree.label,
        "release": tree.release,
        "forward_modes": members,
        "backends": backends,
        "spec_inputs": classes,
        "installs": [i for i in installs if i["modes"]],
        "unresolved_installs": [i for i in installs if not i["modes"]],
        "runner_sites": sites,
        "unparsed": unparsed,
        "findings": findings,
    }


def query(
    result: dict,
    attr: str | None = None,
    spec_class: str | None = None,
    mode: str | None = None,
    backend: str | None = None,
) -> list[dict]:
    """Findings matching every given field (e.g. the kv_indptr survey: attr="kv_indptr")."""
    return [
        f
        for f in result["findings"]
        if (attr is None or f["attr"] == attr)
        and (spec_class is None or f["spec_class"] == spec_class)
        and (mode is None or f["mode"] == mode)
        and (backend is None or f["backend"] == backend)
    ]


def format_findings(findings: list[AnyFinding]) -> str:
    """One line per finding."""
    if not findings:
        return "no findings"
    rows = [
        (
            f.source,
            f.backend,
            f.mode,
            f.spec_class,
            f.attr,
            f"{f.read_file.split('/')[-1]}:{f.read_line}",
            f"{f.install_file.split('/')[-1]}:{f.install_line}",
            f.verdict or "",
        )
        for f in findings
    ]
    head = ("source", "backend", "mode", "class", "attribute", "read", "install", "verdict")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in [head, *rows]
    )
