"""Lint + replays + triage over releases and checkouts: the guard against the whole bug class."""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .env import EnvBuildError, ensure_env
from .lint import analyse, dir_sources, source_root, wheel_sources
from .releases import Log, check_version, default_cache_dir, echo, ensure_wheel, known_releases
from .triage import replay_cases, replay_matrix, triage

_VERSION = re.compile(r"""^\s*(?:__version__|version)\b[^\n'"]*=\s*['"](\d+\.\d+[^'"]*)['"]""", re.M)


def checkout_version(path: Path) -> str | None:
    """The version a checkout declares (`sglang/_version.py`, `sglang/version.py`, pyproject)."""
    root = source_root(path)
    for rel in ("sglang/_version.py", "sglang/version.py", "pyproject.toml"):
        p = root / rel
        if p.exists() and (m := _VERSION.search(p.read_text(errors="replace"))):
            return m.group(1)
    return None


def nearest_release(version: str | None, known: list[str]) -> str:
    """The newest release not newer than `version` (its base version); the newest if unknown."""
    finals = [v for v in known if not Version(v).is_prerelease]
    try:
        base = Version(Version(version).base_version) if version else None
    except InvalidVersion:
        base = None
    if base is None or base < Version("0.5.10"):
        return finals[-1]
    dev = Version(version).is_devrelease or Version(version).is_prerelease
    older = [v for v in finals if (Version(v) < base if dev else Version(v) <= Version(f"{base}.post999"))]
    older = older or finals[:1]
    return older[-1]


def summary(analysis: dict) -> dict:
    """The JSON-sized part of a lint analysis (no per-read lists)."""
    return {
        "source": analysis["source"],
        "forward_modes": analysis["forward_modes"],
        "backend_classes": len(analysis["backends"]),
        "spec_reads": sum(len(b["reads"]) for b in analysis["backends"].values()),
        "spec_inputs": {
            n: {"file": c["file"], "line": c["line"], "attrs": len(c["attrs"])}
            for n, c in analysis["spec_inputs"].items()
        },
        "installs": analysis["installs"],
        "unresolved_installs": analysis["unresolved_installs"],
    }


def check_source(
    sources: dict[str, str],
    label: str,
    env_release: str | None,
    cache_dir: Path,
    src_root: Path | None,
    replay: bool,
    log: Log,
    timeout_s: float,
) -> dict:
    """Lint one source tree; with `replay`, run its replay matrix and triage every finding."""
    analysis = analyse(sources, label)
    out = {"source": label, "lint": summary(analysis), "findings": analysis["findings"], "replay": None}
    log(
        f"[{label}] lint: {len(analysis['findings'])} finding(s), "
        f"{len(analysis['installs'])} installs, {len(analysis['backends'])} backend classes"
    )
    if not replay:
        return out
    cases = replay_cases(analysis)
    try:
        env = ensure_env(env_release, cache_dir, log=log, src_root=src_root)
    except EnvBuildError as exc:
        matrix = {"status": "error", "cases": [], "message": f"environment: {exc}"}
    else:
        log(f"[{label}] replaying {len(cases)} case(s) on {env.group} (sources: {env.src_root}) ...")
        matrix = replay_matrix(env, cases, timeout_s)
        matrix.update(env_release=env_release, env_group=env.group, env_cached=env.cached, env_build_s=env.built_in_s)
    out["replay"] = matrix
    out["findings"] = triage(analysis, matrix)
    counts = {}
    for f in out["findings"]:
        counts[f["triage"]["status"]] = counts.get(f["triage"]["status"], 0) + 1
    log(f"[{label}] replays: {len(matrix['cases'])} case(s) in {matrix.get('run_s')} s; triage {counts}")
    return out


def check(
    versions: list[str] | None = None,
    src: Path | None = None,
    env_release: str | None = None,
    replay: bool = True,
    cache_dir: Path | None = None,
    log: Log = echo,
    timeout_s: float = 900,
) -> dict:
    """Lint (and replay, triage) releases and/or a checkout. Findings under `findings`."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    known = known_releases(cache_dir)
    results = []
    for v in [check_version(v, known) for v in versions or []]:
        wheel, _ = ensure_wheel(v, cache_dir, log)
        results.append(check_source(wheel_sources(wheel), f"sglang {v}", v, cache_dir, None, replay, log, timeout_s))
    if src is not None:
        root = source_root(src)
        declared = checkout_version(root)
        env_v = check_version(env_release, known) if env_release else nearest_release(declared, known)
        res = check_source(dir_sources(root), f"checkout {root}", env_v, cache_dir, root, replay, log, timeout_s)
        res.update(declared_version=declared, env_release=env_v)
        results.append(res)
    return {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "sources": [r["source"] for r in results],
        "findings": [f for r in results for f in r["findings"]],
        "results": results,
    }
