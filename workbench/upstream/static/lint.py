"""The contract lint over real SGLang sources: backend reads x installed spec inputs -> findings.

A finding is a read of `spec_info.<attr>` reachable from an attention backend's
`init_forward_metadata` in forward mode M, not guarded for class C, where a speculative worker
installs C as `spec_info` in mode M and C's instances lack `<attr>`. Sources are read with `ast`
from a `SourceTree` (a release's unpacked wheel, a checkout, text in memory), never imported.
The finding's JSON shape is documented in docs/upstream-guard.md.
"""

from __future__ import annotations

from ..sources.trees import SourceTree
from .classes import spec_input_classes
from .flow import Program
from .installs import scan_installs
from .modes import parse_forward_modes
from .reads import backend_reads

SPEC_DIR = "sglang/srt/speculative/"
ATTN_DIR = "sglang/srt/layers/attention/"
MODES_FILE = "sglang/srt/model_executor/forward_batch_info.py"
# Where installs are looked for besides SPEC_DIR: the files of these folders that mention spec_info.
FLOW_DIRS = ("sglang/srt/managers/", "sglang/srt/model_executor/", "sglang/srt/disaggregation/")


def flow_files(tree: SourceTree) -> dict[str, str]:
    """The files whose functions the install analysis follows: speculative/, and the runner, manager
    and disaggregation files that mention `spec_info`."""
    out = tree.under(SPEC_DIR)
    for d in FLOW_DIRS:
        out.update({p: t for p, t in tree.under(d).items() if "spec_info" in t})
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


def analyse(tree: SourceTree) -> dict:
    """Backends, spec-input classes, installs and findings of one source tree."""
    modes_src = tree.get(MODES_FILE)
    fm = parse_forward_modes(modes_src) if modes_src else None
    members = fm.members if fm else []
    spec = tree.under(SPEC_DIR)
    classes = spec_input_classes(spec)
    installs = scan_installs(Program(flow_files(tree), classes), members)
    backends: dict[str, dict] = {}
    for fname, text in sorted(tree.under(ATTN_DIR).items()):
        try:
            per_class = backend_reads(fname, text, fm)
        except SyntaxError:
            continue
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


def format_findings(findings: list[dict]) -> str:
    """One line per finding."""
    if not findings:
        return "no findings"
    rows = [
        (
            f["source"],
            f["backend"],
            f["mode"],
            f["spec_class"],
            f["attr"],
            f"{f['read_file'].split('/')[-1]}:{f['read_line']}",
            f"{f['install_file'].split('/')[-1]}:{f['install_line']}",
            f.get("verdict") or "",
        )
        for f in findings
    ]
    head = ("source", "backend", "mode", "class", "attribute", "read", "install", "verdict")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in [head, *rows]
    )
