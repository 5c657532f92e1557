"""Cached replay environments: one dependency venv per compatible release range, sources apart.

A dependency venv holds torch (CPU), triton and the imports sglang needs, but no sglang: the
releases whose wheels pin the same transformers share it. Each release's (or a checkout's)
`sglang/` package is put first on `sys.path` by the driver. So a checkout reuses the nearest
release's environment and 18 releases need five venvs, not eighteen.

The venvs are built with uv from one package store under the cache (`<cache>/uv`): each wheel is
unpacked there once and hard-linked into every venv, so torch and triton take their disk once
however many venvs hold them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from ..context import UpstreamContext
from .releases import ensure_wheel, wheel_requirements
from .standin import STANDIN_NOTE, write_standin

TORCH_PIN = "torch==2.13.0"  # the CPU build: from $TORCH_INDEX when set (PyPI's torch is the CUDA build)
TORCH_INDEX_ENV = "TORCH_INDEX"  # a pip index for torch alone, as the Makefile's TORCH_INDEX
TRITON_PIN = "triton==3.9.0"
# What sglang's import chain for the replay path needs; a pin in the release's own
# metadata (transformers, openai) wins over the bare name.
IMPORT_DEPS: tuple[str, ...] = (
    "transformers",
    "openai",
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "pillow",
    "starlette",
    "tqdm",
    "IPython",
    "pydantic",
    "aiohttp",
    "pyzmq",
    "partial-json-parser",
    "dill",
    "sentencepiece",
    "einops",
    "compressed-tensors",
    "gguf",
    "msgspec",
    "fastapi",
    "uvicorn",
)
# What the real runtime (scheduler, model runner) imports besides the replay path's imports:
# the real runtime (workbench/upstream/runtime) needs them; a cached venv gets them in place.
RUNTIME_DEPS: tuple[str, ...] = ("setproctitle", "uvloop", "prometheus-client")
LATER_DEPS: tuple[str, ...] = ("apache-tvm-ffi",)  # needed by releases after 0.5.14
XGRAMMAR_FROM = "0.5.16"  # server_args imports xgrammar (function-call parser) from this release
READY_MARKER = ".workbench-ready.json"
UV_STORE = "uv"  # uv's cache under the upstream cache: on the venvs' file system, so it can hard-link
# pip's settings that choose where packages come from, and uv's option for each (uv reads no pip.conf)
PIP_INDEX_SETTINGS: tuple[tuple[str, str], ...] = (
    ("index-url", "--index-url"),
    ("extra-index-url", "--extra-index-url"),
    ("find-links", "--find-links"),
    ("constraint", "--constraint"),
)
_UV_STEP = re.compile(r"^(Resolved|Prepared|Installed|Uninstalled|error|warning|hint|  cause| \+ (torch|triton)=)")


class EnvBuildError(RuntimeError):
    """An environment step failed; `missing` names the piece that could not be installed."""

    def __init__(self, step: str, missing: str, detail: str):
        super().__init__(f"{step}: {missing}: {detail}")
        self.step, self.missing, self.detail = step, missing, detail


@dataclass
class ReleaseEnv:
    """A ready release environment: a dependency venv plus the sglang sources to put first."""

    version: str
    root: Path
    python: Path
    cached: bool
    install_s: float
    packages: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    built_in_s: float | None = None  # how long the (possibly earlier) build took
    src_root: Path | None = None  # the folder holding `sglang/`; None: sglang is installed
    group: str = ""


def dependency_specs(version: str, wheel: Path) -> list[str]:
    """The pip requirement strings installed besides torch and triton."""
    pins = wheel_requirements(wheel)
    names = list(IMPORT_DEPS) + list(RUNTIME_DEPS)
    if Version(version) > Version("0.5.14"):
        names += LATER_DEPS
    if Version(version) >= Version(XGRAMMAR_FROM):
        names.append("xgrammar")
    return [pins.get(n.lower(), n) for n in names]


def dependency_group(version: str, wheel: Path) -> str:
    """The name of the dependency venv `version` shares with its compatible releases."""
    pin = wheel_requirements(wheel).get("transformers", "transformers").replace("==", "-")
    return f"deps-{pin}" + ("-tvmffi" if Version(version) > Version("0.5.14") else "")


def _missing_from(output: str) -> str:
    """The requirement uv's resolver names as unavailable in `output` (its error text)."""
    for pattern in (
        r"there is no version of (\S+?) and",
        r"\S+ was not found in the (?:package registry|provided package locations) and you require (\S+?)[,\s]",
        r"you require (\S+?), we can conclude",
    ):
        found = re.search(pattern, output)
        if found:
            return found.group(1)
    return "unknown package (see detail)"


def uv_bin() -> Path:
    """The uv executable of the `uv` package (a dependency of this project)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        raise EnvBuildError("uv", "uv", "the `uv` package is not installed: `make venv` installs it") from None
    return Path(find_uv_bin())


def pip_index_args() -> list[str]:
    """uv options for the indexes, find-links and constraints pip is configured with (its config files
    and PIP_* variables, as `pip config list` shows them), so a uv build draws from where pip would.
    An ``:env:`` value wins over an ``install.`` one over a ``global.`` one, as in pip."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if proc.returncode != 0:  # no pip here: uv's own settings alone
        return []
    found: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        match = re.fullmatch(r"([^.=]*)\.([a-z-]+)='(.*)'", line.strip())
        if match:
            found[f"{match.group(1)}.{match.group(2)}"] = match.group(3)
    args: list[str] = []
    for key, option in PIP_INDEX_SETTINGS:
        scopes = [f"{scope}.{key}" for scope in (":env:", "install", "global") if f"{scope}.{key}" in found]
        value = found[scopes[0]] if scopes else ""
        for item in value.split():
            args += [option, item]
    return args


def uv_install_command(ctx: UpstreamContext, python: Path, args: list[str]) -> list[str]:
    """The `uv pip install args` command for `python`'s venv: from the one store `<cache>/uv`, hard-linked.

    pip's configured indexes come first (`pip_index_args`); an ``--index-url`` in `args` replaces the
    configured one, as on pip's command line. pip picks the best version across every index; uv would
    stop at the first index holding a package, so `--index-strategy unsafe-best-match` keeps the builds
    resolving as they did with pip."""
    index_args = pip_index_args()
    if "--index-url" in args:
        at = {i for i, a in enumerate(index_args) if a == "--index-url"}
        index_args = [a for i, a in enumerate(index_args) if i not in at and i - 1 not in at]
    return [
        str(uv_bin()),
        "pip",
        "install",
        "--python",
        str(python),
        "--cache-dir",
        str(ctx.cache_dir / UV_STORE),
        "--link-mode",
        "hardlink",
        "--index-strategy",
        "unsafe-best-match",
        "--color",
        "never",
        *index_args,
        *args,
    ]


def uv_install(ctx: UpstreamContext, python: Path, args: list[str], step: str, tag: str) -> None:
    """Run `uv_install_command`, logging uv's summary lines; EnvBuildError naming what could not be installed."""
    ctx.log(f"{tag} uv pip install {' '.join(args)}")
    proc = subprocess.Popen(
        uv_install_command(ctx, python, args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if _UV_STEP.match(line):
            ctx.log(f"{tag}   {line.strip()[:160]}")
    if proc.wait() != 0:
        raise EnvBuildError(step, _missing_from("\n".join(lines)), " | ".join(lines[-4:]))


def make_venv(root: Path) -> Path:
    """A new venv at `root` on this interpreter (uv venv: no pip inside; uv installs into it); its python."""
    made = subprocess.run(
        [str(uv_bin()), "venv", "--quiet", "--python", sys.executable, str(root)], capture_output=True, text=True
    )
    if made.returncode != 0:
        raise EnvBuildError("venv", f"uv venv --python {sys.executable}", made.stderr.strip()[-300:])
    return root / "bin" / "python"


def torch_args() -> list[str]:
    """Install arguments for torch: the pin alone, or with ``$TORCH_INDEX`` set the pin from that index
    without dependencies (they come with the next install, from the usual indexes), as ``make venv`` does."""
    index = os.environ.get(TORCH_INDEX_ENV, "").strip()
    return [TORCH_PIN, "--index-url", index, "--no-deps"] if index else [TORCH_PIN]


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _installed_versions(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json\nout = {}\n"
        "for n in ('torch','triton','transformers','torchvision','xgrammar'):\n"
        "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _not_installed(python: Path, specs: list[str]) -> list[str]:
    names = {re.split(r"[\s\[<>=!~;]", x, maxsplit=1)[0]: x for x in specs}
    code = (
        "import importlib.metadata as m, json, sys\nout = []\nfor n in json.loads(sys.argv[1]):\n"
        "    try: m.version(n)\n    except m.PackageNotFoundError: out.append(n)\nprint(json.dumps(out))"
    )
    proc = subprocess.run([str(python), "-c", code, json.dumps(list(names))], capture_output=True, text=True)
    return [names[n] for n in json.loads(proc.stdout)] if proc.returncode == 0 else []


def pin_mismatch(marker: dict) -> str | None:
    """How a cached venv's torch or triton (as its READY marker records them) differs from the pins;
    None when both match (a local build label such as ``+cpu`` aside)."""
    packages = marker.get("packages") or {}
    for pin in (TORCH_PIN, TRITON_PIN):
        name, version = pin.split("==")
        have = packages.get(name)
        if (have or "").split("+")[0] != version:
            return f"{name} {have or 'missing'}, not {version}"
    return None


def ensure_sources(ctx: UpstreamContext, version: str) -> Path:
    """The release's wheel unpacked under `<cache>/src/sglang-<version>` (holds `sglang/`)."""
    with ctx.lock(f"src-{version}"):
        return _ensure_sources(ctx, version)


def _ensure_sources(ctx: UpstreamContext, version: str) -> Path:
    root = ctx.cache_dir / "src" / f"sglang-{version}"
    if (root / READY_MARKER).exists():
        return root
    try:
        wheel, _ = ensure_wheel(ctx, version)
    except RuntimeError as exc:
        raise EnvBuildError("download", f"sglang=={version}", str(exc)) from None
    if root.exists():
        shutil.rmtree(root)
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.startswith("sglang/")]
        zf.extractall(root, members)
    (root / READY_MARKER).write_text(json.dumps({"version": version, "wheel": wheel.name}))
    return root


def ensure_deps(ctx: UpstreamContext, version: str) -> ReleaseEnv:
    """Build (or reuse; `ctx.rebuild` rebuilds) the dependency venv of `version`'s range; no sglang inside."""
    try:
        wheel, _ = ensure_wheel(ctx, version)
    except RuntimeError as exc:
        raise EnvBuildError("download", f"sglang=={version}", str(exc)) from None
    group = dependency_group(version, wheel)
    with ctx.lock(group):
        return _ensure_deps(ctx, version, wheel, group)


def _ensure_deps(ctx: UpstreamContext, version: str, wheel: Path, group: str) -> ReleaseEnv:
    log, rebuild = ctx.log, ctx.rebuild
    root = ctx.cache_dir / group
    python, marker, tag = root / "bin" / "python", root / READY_MARKER, f"[{group}]"
    specs = dependency_specs(version, wheel)
    info = json.loads(marker.read_text()) if marker.exists() and python.exists() and not rebuild else None
    stale = None if info is None else pin_mismatch(info)
    if stale:  # e.g. a cache restored from an older key: torch or triton is not the pinned one
        log(f"{tag} rebuilding: the cached venv has {stale}")
    if info is not None and not stale:
        extra = _not_installed(python, specs)
        if extra:  # a later release of the range imports one more package: add it in place
            uv_install(ctx, python, extra, "imports", tag)
            info["specs"] = sorted(set(info.get("specs", [])) | set(specs))
            info["packages"] = _installed_versions(python)
            marker.write_text(json.dumps(info, indent=1))
        return ReleaseEnv(
            version,
            root,
            python,
            True,
            0.0,
            info.get("packages", {}),
            info.get("notes", []),
            info.get("install_s"),
            group=group,
        )
    start = time.perf_counter()
    if root.exists():
        shutil.rmtree(root)
    log(f"{tag} creating the dependency venv {root} (for sglang {version} and its range)")
    make_venv(root)
    uv_install(ctx, python, torch_args(), "torch", tag)
    uv_install(ctx, python, [TORCH_PIN, TRITON_PIN, *specs], "imports", tag)  # torch's own deps come here
    write_standin(_site_packages(python))
    log(f"{tag} {STANDIN_NOTE}")
    packages = _installed_versions(python)
    install_s = round(time.perf_counter() - start, 1)
    marker.write_text(
        json.dumps(
            {
                "group": group,
                "built_for": version,
                "specs": specs,
                "packages": packages,
                "notes": [STANDIN_NOTE],
                "install_s": install_s,
                "installer": f"uv ({ctx.cache_dir / UV_STORE}, hard links)",
            },
            indent=1,
        )
    )
    log(f"{tag} dependency venv ready in {install_s:.1f} s")
    return ReleaseEnv(version, root, python, False, install_s, packages, [STANDIN_NOTE], install_s, group=group)


def add_packages(ctx: UpstreamContext, env: ReleaseEnv, specs: list[str]) -> list[str]:
    """Install the ``specs`` a cached environment lacks, in place (as a later release's imports are
    added); returns what was installed. Raises EnvBuildError naming a package uv could not install."""
    with ctx.lock(env.group or env.root.name):
        missing = _not_installed(env.python, specs)
        if missing:
            uv_install(ctx, env.python, missing, "imports", f"[{env.group or env.root.name}]")
            marker = env.root / READY_MARKER
            info = json.loads(marker.read_text())
            info["added"] = sorted(set(info.get("added", [])) | set(missing))
            marker.write_text(json.dumps(info, indent=1))
    return missing


def ensure_env(ctx: UpstreamContext, version: str, src_root: Path | None = None) -> ReleaseEnv:
    """The release environment of `version`: its range's dependency venv + its sources first.

    `src_root` (a checkout's folder holding `sglang/`) replaces the release's own sources:
    a checkout runs on the environment of the release named by `version`.
    """
    start = time.perf_counter()
    env = ensure_deps(ctx, version)
    env.src_root = src_root if src_root is not None else ensure_sources(ctx, version)
    env.packages = {**env.packages, "sglang": version if src_root is None else f"checkout near {version}"}
    if env.cached:
        env.install_s = round(time.perf_counter() - start, 2)
    return env
