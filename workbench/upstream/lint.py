"""Contract lint over real SGLang sources: backend reads x installed spec inputs -> findings.

A finding is a read of `spec_info.<attr>` reachable from an attention backend's
`init_forward_metadata` in forward mode M, not guarded for class C, where a speculative worker
installs C as `spec_info` in mode M and C's instances lack `<attr>`. Sources are read with `ast`
from a release wheel or a checkout, never imported.
"""

from __future__ import annotations

import datetime as _dt
import zipfile
from pathlib import Path

from .lint_classes import spec_input_classes
from .lint_installs import scan_installs
from .lint_modes import parse_forward_modes
from .lint_reads import backend_reads
from .releases import check_version, default_cache_dir, ensure_wheel, known_releases

SPEC_DIR = "sglang/srt/speculative/"
ATTN_DIR = "sglang/srt/layers/attention/"
MODES_FILE = "sglang/srt/model_executor/forward_batch_info.py"


class SourceError(ValueError):
    """A source folder that holds no sglang package."""


def _wanted(name: str) -> bool:
    return name.endswith(".py") and (name.startswith((SPEC_DIR, ATTN_DIR)) or name == MODES_FILE)


def wheel_sources(wheel: Path) -> dict[str, str]:
    """The linted sources of a wheel: {path below the wheel root: text}."""
    with zipfile.ZipFile(wheel) as zf:
        return {n: zf.read(n).decode("utf-8", "replace") for n in zf.namelist() if _wanted(n)}


def source_root(path: Path) -> Path:
    """The folder holding `sglang/` for a checkout root, its `python/` folder or that folder."""
    path = Path(path).expanduser().resolve()
    for cand in (path, path / "python"):
        if (cand / "sglang" / "srt").is_dir():
            return cand
    raise SourceError(
        f"--sglang-src {str(path)!r}: no sglang/srt package there or in its python/ "
        "folder; give an sglang checkout root or its python/ folder"
    )


def dir_sources(path: Path) -> dict[str, str]:
    """The linted sources of a checkout (see `source_root`)."""
    root = source_root(path)
    out = {}
    for sub in (SPEC_DIR, ATTN_DIR):
        for p in sorted((root / sub).rglob("*.py")):
            out[p.relative_to(root).as_posix()] = p.read_text(encoding="utf-8", errors="replace")
    modes = root / MODES_FILE
    if modes.exists():
        out[MODES_FILE] = modes.read_text(encoding="utf-8", errors="replace")
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


def analyse(sources: dict[str, str], label: str) -> dict:
    """Backends, spec-input classes, installs and findings of one source tree."""
    modes_src = sources.get(MODES_FILE)
    fm = parse_forward_modes(modes_src) if modes_src else None
    members = fm.members if fm else []
    spec = {k: v for k, v in sources.items() if k.startswith(SPEC_DIR)}
    classes = spec_input_classes(spec)
    installs = scan_installs(spec, set(classes), members)
    backends: dict[str, dict] = {}
    for fname, text in sorted(sources.items()):
        if not fname.startswith(ATTN_DIR):
            continue
        try:
            per_class = backend_reads(fname, text, fm)
        except SyntaxError:
            continue
        for bcls, reads in per_class.items():
            backends[f"{fname}:{bcls}"] = {"backend": backend_name(fname), "file": fname, "class": bcls, "reads": reads}
    findings = []
    for _key, be in backends.items():
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
                    later = cls["set_later"].get(read["attr"])
                    findings.append(
                        {
                            "source": label,
                            "backend": be["backend"],
                            "backend_class": be["class"],
                            "forward_mode": mode,
                            "class": cname,
                            "attribute": read["attr"],
                            "read": f"{read['file']}:{read['line']}",
                            "read_code": read["code"],
                            "read_function": read["function"],
                            "install": f"{at[0]['install_file']}:{at[0]['install_line']}",
                            "installs": [f"{i['install_file']}:{i['install_line']} ({i['mode_from']})" for i in at],
                            "class_defined": f"{cls['file']}:{cls['line']}",
                            "set_later": f"{later['how']} at {later['file']}:{later['line']}" if later else None,
                        }
                    )
    unique = {(f["backend_class"], f["forward_mode"], f["class"], f["attribute"], f["read"]): f for f in findings}
    findings = sorted(unique.values(), key=lambda f: (f["backend"], f["read"], f["forward_mode"], f["class"]))
    return {
        "source": label,
        "forward_modes": members,
        "backends": backends,
        "spec_inputs": classes,
        "installs": [i for i in installs if i["modes"]],
        "unresolved_installs": [i for i in installs if not i["modes"]],
        "findings": findings,
    }


def finding_key(f: dict) -> str:
    """A stable id of a finding across releases (no line numbers): for triage files."""
    return f"{f['backend']}|{f['backend_class']}|{f['forward_mode']}|{f['class']}|{f['attribute']}"


def lint(versions: list[str] | None = None, src: Path | None = None, cache_dir: Path | None = None, log=print) -> dict:
    """Lint releases (their cached wheels) and/or a checkout; JSON-ready, findings under `findings`."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    results = []
    if versions:
        known = known_releases(cache_dir)
        for v in [check_version(v, known) for v in versions]:
            wheel, _ = ensure_wheel(v, cache_dir, log)
            results.append(analyse(wheel_sources(wheel), f"sglang {v}"))
    if src is not None:
        results.append(analyse(dir_sources(src), f"checkout {source_root(src)}"))
    return {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "sources": [r["source"] for r in results],
        "findings": [f for r in results for f in r["findings"]],
        "results": results,
    }


def query(
    result: dict,
    attribute: str | None = None,
    cls: str | None = None,
    mode: str | None = None,
    backend: str | None = None,
) -> list[dict]:
    """Findings matching every given field (e.g. the kv_indptr survey: attribute="kv_indptr")."""
    return [
        f
        for f in result["findings"]
        if (attribute is None or f["attribute"] == attribute)
        and (cls is None or f["class"] == cls)
        and (mode is None or f["forward_mode"] == mode)
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
            f["forward_mode"],
            f["class"],
            f["attribute"],
            f["read"].split("/")[-1],
            f["install"].split("/")[-1],
            f.get("triage", {}).get("status", ""),
        )
        for f in findings
    ]
    head = ("source", "backend", "mode", "class", "attribute", "read", "install", "triage")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join(
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in [head, *rows]
    )
