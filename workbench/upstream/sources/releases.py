"""SGLang releases on PyPI: version checks, the release list and the wheel cache."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..context import UpstreamContext

PACKAGE = "sglang"
DEFAULT_VERSIONS: tuple[str, ...] = ("0.5.11", "0.5.12", "0.5.13", "0.5.14")
# Used only when PyPI cannot be asked and nothing is cached yet.
FALLBACK_RELEASES: tuple[str, ...] = (
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
_RELEASES_TTL_S = 24 * 3600


class ReleaseError(ValueError):
    """A version string that is malformed or not a published release."""


def version_key(version: str) -> Version:
    """A sort key that orders 0.5.9 < 0.5.13 < 0.5.13.post1 < 0.5.14."""
    return Version(version)


def _pip(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def _query_pypi() -> list[str]:
    proc = _pip(["index", "versions", PACKAGE], timeout=180)
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise RuntimeError(f"pip index versions {PACKAGE} failed: {proc.stderr.strip()[-300:]}")


def known_releases(ctx: UpstreamContext, refresh: bool = False, strict: bool = False) -> list[str]:
    """All sglang releases, oldest first, from PyPI (cached a day), else the cache, else a fallback.

    `strict` (with `refresh`): PyPI must answer; a failed query raises ReleaseError instead of
    falling back (the lane must know the newest release, not guess it).
    """
    cache_file = ctx.cache_dir / "releases.json"
    cached: dict = {}
    if cache_file.exists():
        try:
            cached = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            cached = {}
    fresh = cached and time.time() - cached.get("fetched_at", 0) < _RELEASES_TTL_S
    if fresh and not refresh:
        return sorted(cached["versions"], key=version_key)
    try:
        versions = _query_pypi()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        if strict:
            raise ReleaseError(f"could not ask PyPI for the sglang releases: {exc}") from None
        versions = cached.get("versions") or list(FALLBACK_RELEASES)
    else:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps({"fetched_at": time.time(), "versions": versions}))
    return sorted(versions, key=version_key)


def latest_release(ctx: UpstreamContext, refresh: bool = False, strict: bool = False) -> str:
    """The newest sglang release (ignoring pre-releases); see `known_releases` for `strict`."""
    finals = [v for v in known_releases(ctx, refresh, strict) if not Version(v).is_prerelease]
    return finals[-1]


def default_versions(ctx: UpstreamContext) -> list[str]:
    """0.5.11-0.5.14 plus the newest release."""
    versions = list(DEFAULT_VERSIONS)
    newest = latest_release(ctx)
    if newest not in versions:
        versions.append(newest)
    return versions


def check_versions(ctx: UpstreamContext, versions: list[str]) -> list[str]:
    """Each of `versions` checked against the known releases (ReleaseError names a bad one)."""
    known = known_releases(ctx)
    return [check_version(v, known) for v in versions]


def check_version(version: str, known: list[str]) -> str:
    """Return `version` if it names a known release; else raise ReleaseError naming it."""
    recent_list = [v for v in known if Version(v) >= Version("0.5.10")] or known[-20:]
    older = len(known) - len(recent_list)
    recent = ", ".join(recent_list) + (f" (and {older} older)" if older > 0 else "")
    try:
        Version(str(version).strip())
    except InvalidVersion:
        raise ReleaseError(
            f"bad sglang version {version!r}: not a version string like 0.5.13 or "
            f"0.5.13.post1; known releases: {recent}"
        ) from None
    if version.strip() not in known:
        raise ReleaseError(f"bad sglang version {version!r}: no such release on PyPI; known releases: {recent}")
    return version.strip()


def ensure_wheel(ctx: UpstreamContext, version: str) -> tuple[Path, bool]:
    """Path of the cached sglang wheel for `version` (downloading it if absent), and whether it was cached.

    Holds the wheel's cache lock while it looks and downloads.
    """
    with ctx.lock(f"wheel-{version}"):
        return _ensure_wheel(ctx, version)


def _ensure_wheel(ctx: UpstreamContext, version: str) -> tuple[Path, bool]:
    wheel_dir = ctx.cache_dir / "wheels"
    found = sorted(wheel_dir.glob(f"{PACKAGE}-{version}-*.whl"))
    if found:
        return found[0], True
    wheel_dir.mkdir(parents=True, exist_ok=True)
    ctx.log(f"[sglang-{version}] pip download {PACKAGE}=={version} --no-deps --only-binary=:all:")
    proc = _pip(
        [
            "download",
            f"{PACKAGE}=={version}",
            "--no-deps",
            "--only-binary=:all:",
            "--progress-bar",
            "off",
            "-d",
            str(wheel_dir),
        ]
    )
    found = sorted(wheel_dir.glob(f"{PACKAGE}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"pip download {PACKAGE}=={version} failed: {' | '.join(tail)}")
    return found[0], False


def wheel_requirements(wheel: Path) -> dict[str, str]:
    """Unconditional Requires-Dist pins of a wheel: lower-cased name -> requirement string."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8", "replace")
    reqs: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if ";" in req:
            continue
        name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]
        reqs[name.lower().replace("_", "-")] = req
    return reqs
