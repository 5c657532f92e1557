"""Cached replay environments: one dependency venv per compatible release range, sources apart.

A dependency venv holds torch (CPU), triton and the imports sglang needs, but no sglang: the
releases whose wheels pin the same transformers share it. Each release's (or a checkout's)
`sglang/` package is put first on `sys.path` by the driver. So a checkout reuses the nearest
release's environment and 18 releases need five venvs, not eighteen.
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

from ..context import Log, UpstreamContext
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
# the real-runtime lane (workbench/upstream/runtime) needs them; a cached venv gets them in place.
RUNTIME_DEPS: tuple[str, ...] = ("setproctitle", "uvloop", "prometheus-client")
LATER_DEPS: tuple[str, ...] = ("apache-tvm-ffi",)  # needed by releases after 0.5.14
XGRAMMAR_FROM = "0.5.16"  # server_args imports xgrammar (function-call parser) from this release
READY_MARKER = ".workbench-ready.json"
_PIP_STEP = re.compile(
    r"^(Collecting|Downloading|Installing|Successfully|Processing|ERROR|"
    r"Requirement already satisfied: (torch|triton))"
)


class EnvBuildError(RuntimeError):
    """An environment step failed; `missing` names the piece that could not be installed."""

    def __init__(self, step: str, missing: str, detail: str):
        super().__init__(f"{step}: {missing}: {detail}")
        self.step, self.missing, self.detail = step, missing, detail


@dataclass
class ReplayEnv:
    """A ready replay environment: a dependency venv plus the sglang sources to put first."""

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
    for pattern in (
        r"No matching distribution found for (\S+)",
        r"Could not find a version that satisfies the requirement (\S+)",
        r"ResolutionImpossible.*?(\S+==\S+)",
    ):
        found = re.search(pattern, output, re.S)
        if found:
            return found.group(1)
    return "unknown package (see detail)"


def _pip_install(python: Path, args: list[str], step: str, tag: str, log: Log) -> None:
    cmd = [str(python), "-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check", *args]
    log(f"{tag} pip install {' '.join(args)}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if _PIP_STEP.match(line.strip()):
            log(f"{tag}   {line.strip()[:160]}")
    if proc.wait() != 0:
        text = "\n".join(lines)
        raise EnvBuildError(step, _missing_from(text), " | ".join(lines[-4:]))


def torch_args() -> list[str]:
    """pip arguments installing torch: the pin alone, or with ``$TORCH_INDEX`` set the pin from that index
    without dependencies (they come with the next install, from pip's usual indexes), as ``make venv`` does."""
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


def ensure_deps(ctx: UpstreamContext, version: str) -> ReplayEnv:
    """Build (or reuse; `ctx.rebuild` rebuilds) the dependency venv of `version`'s range; no sglang inside."""
    try:
        wheel, _ = ensure_wheel(ctx, version)
    except RuntimeError as exc:
        raise EnvBuildError("download", f"sglang=={version}", str(exc)) from None
    group = dependency_group(version, wheel)
    with ctx.lock(group):
        return _ensure_deps(ctx, version, wheel, group)


def _ensure_deps(ctx: UpstreamContext, version: str, wheel: Path, group: str) -> ReplayEnv:
    log, rebuild = ctx.log, ctx.rebuild
    root = ctx.cache_dir / group
    python, marker, tag = root / "bin" / "python", root / READY_MARKER, f"[{group}]"
    specs = dependency_specs(version, wheel)
    if marker.exists() and python.exists() and not rebuild:
        info = json.loads(marker.read_text())
        extra = _not_installed(python, specs)
        if extra:  # a later release of the range imports one more package: add it in place
            _pip_install(python, extra, "imports", tag, log)
            info["specs"] = sorted(set(info.get("specs", [])) | set(specs))
            info["packages"] = _installed_versions(python)
            marker.write_text(json.dumps(info, indent=1))
        return ReplayEnv(
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
    made = subprocess.run([sys.executable, "-m", "venv", str(root)], capture_output=True, text=True)
    if made.returncode != 0:
        raise EnvBuildError("venv", f"{sys.executable} -m venv", made.stderr.strip()[-300:])
    _pip_install(python, torch_args(), "torch", tag, log)
    _pip_install(python, [TORCH_PIN, TRITON_PIN, *specs], "imports", tag, log)  # torch's own deps come here
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
            },
            indent=1,
        )
    )
    log(f"{tag} dependency venv ready in {install_s:.1f} s")
    return ReplayEnv(version, root, python, False, install_s, packages, [STANDIN_NOTE], install_s, group=group)


def add_packages(ctx: UpstreamContext, env: ReplayEnv, specs: list[str]) -> list[str]:
    """Install the ``specs`` a cached environment lacks, in place (as a later release's imports are
    added); returns what was installed. Raises EnvBuildError naming a package pip could not install."""
    with ctx.lock(env.group or env.root.name):
        missing = _not_installed(env.python, specs)
        if missing:
            _pip_install(env.python, missing, "imports", f"[{env.group or env.root.name}]", ctx.log)
            marker = env.root / READY_MARKER
            info = json.loads(marker.read_text())
            info["added"] = sorted(set(info.get("added", [])) | set(missing))
            marker.write_text(json.dumps(info, indent=1))
    return missing


def ensure_env(ctx: UpstreamContext, version: str, src_root: Path | None = None) -> ReplayEnv:
    """The replay environment of `version`: its range's dependency venv + its sources first.

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
