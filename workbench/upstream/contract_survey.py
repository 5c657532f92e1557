"""Contract survey: what each sglang release's sources say about `kv_indptr`, read statically."""

from __future__ import annotations

import datetime as _dt
import zipfile
from pathlib import Path

from .astscan import (
    FIELD,
    draft_extend_spec_info,
    field_accesses,
    spec_info_installs,
    spec_input_classes,
    summarize_accesses,
)
from .releases import (
    Log,
    check_version,
    default_cache_dir,
    default_versions,
    echo,
    ensure_wheel,
    known_releases,
)

SPEC_DIR = "sglang/srt/speculative/"
ATTN_DIR = "sglang/srt/layers/attention/"
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
# Severity of a table cell: -1 not applicable, 0 fine, 1 a risk, 2 the regression itself.
NA, FINE, RISK, BUG = -1, 0, 1, 2


def read_wheel_sources(wheel: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(speculative/*.py, layers/attention/**.py) sources of a wheel, keyed by path below each dir."""
    spec, attn = {}, {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.endswith(".py"):
                continue
            if name.startswith(SPEC_DIR) and "/" not in name[len(SPEC_DIR) :]:
                spec[name[len(SPEC_DIR) :]] = zf.read(name).decode("utf-8", "replace")
            elif name.startswith(ATTN_DIR):
                attn[name[len(ATTN_DIR) :]] = zf.read(name).decode("utf-8", "replace")
    return spec, attn


def analyse_sources(spec: dict[str, str], attn: dict[str, str]) -> dict:
    """Spec-input classes, backend reads of spec_info.kv_indptr, worker installs; plus the facts."""
    classes = spec_input_classes(spec)
    backends = {}
    for fname, text in sorted(attn.items()):
        accesses = field_accesses(text, filename=fname)
        if accesses or fname in BACKEND_FILES.values():
            backends[fname] = {**summarize_accesses(accesses), "present": True, "accesses": accesses}
    workers = {}
    for fname, text in sorted(spec.items()):
        if "worker" in fname:
            installs = spec_info_installs(text, set(classes), filename=fname)
            workers[fname] = {"draft_extend_spec_info": draft_extend_spec_info(installs), "installs": installs}
    analysis = {"spec_inputs": classes, "backends": backends, "workers": workers}
    analysis["facts"] = derive_facts(analysis)
    return analysis


def _yes_no(flag: bool, bad_when: bool | None = None) -> dict:
    return {"text": "yes" if flag else "no", "severity": FINE if bad_when is None or flag != bad_when else BUG}


def derive_facts(analysis: dict) -> dict[str, dict]:
    """The release x fact table row for one release: {fact: {"text", "severity"}}."""
    classes, backends, workers = (analysis[k] for k in ("spec_inputs", "backends", "workers"))
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
                "text": "+".join(k.replace("none_guard", "guard") for k in info["kinds"]),
                "severity": RISK if info["unsafe_reads"] else FINE,
            }
        facts[f"{name} reads spec_info.{FIELD}"] = cell
    for label, fname in WORKER_FILES.items():
        info = workers.get(fname)
        if info is None:
            facts[_WORKER_FACT.format(fname=fname, label=label)] = {"text": "absent", "severity": NA}
            continue
        installs = REGRESSED_CLASS in info["draft_extend_spec_info"]
        lacks = cls is not None and not cls["has_field"]
        facts[_WORKER_FACT.format(fname=fname, label=label)] = {
            "text": "yes" if installs else "no",
            "severity": BUG if installs and lacks else FINE,
        }
    regressed = cls is not None and not cls["has_field"]
    facts[f"regressed class shipped (no {FIELD})"] = {
        "text": "yes" if regressed else "no",
        "severity": BUG if regressed else FINE,
    }
    return facts


def survey(versions: list[str] | None = None, cache_dir: Path | None = None, log: Log = echo) -> dict:
    """Download (or reuse) each release's wheel and read its sources statically; JSON-ready dict."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    known = known_releases(cache_dir)
    if not versions:
        versions = default_versions(cache_dir)
    versions = [check_version(v, known) for v in versions]
    releases = {}
    for version in versions:
        wheel, cached = ensure_wheel(version, cache_dir, log)
        log(f"[sglang-{version}] reading {wheel.name} ({'cached' if cached else 'downloaded'})")
        spec, attn = read_wheel_sources(wheel)
        releases[version] = {"wheel": wheel.name, "wheel_cached": cached, **analyse_sources(spec, attn)}
    fact_names = list(next(iter(releases.values()))["facts"]) if releases else []
    return {
        "package": "sglang",
        "field": FIELD,
        "versions": versions,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
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
                if acc["kind"] != "write":
                    out.append(f"  {fname}:{acc['line']} {acc['kind']:<10} {acc['function']}: {acc['code']}")
        for fname, info in rel["workers"].items():
            for rec in info["installs"]:
                if rec["draft_extend"] and rec["use"] in ("installed", "passed"):
                    out.append(f"  {fname}:{rec['line']} {rec['function']} {rec['use']} {rec['class']}.{rec['how']}")
    return "\n".join(out)
