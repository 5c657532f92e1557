"""Isolated, cached virtual environments that hold one real sglang release each."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from .releases import Log, echo, ensure_wheel, wheel_requirements
from .standin import STANDIN_NOTE, write_standin

TORCH_PIN = "torch==2.13.0"  # the CPU build from local disk; unpinned pulls a CUDA build
TRITON_PIN = "triton==3.9.0"
# What sglang's import chain for the replay path needs (docs/design.md §7); a pin in the
# release's own metadata (transformers, openai) wins over the bare name.
IMPORT_DEPS: tuple[str, ...] = (
    "transformers", "openai", "numpy", "orjson", "psutil", "pybase64", "requests",
    "packaging", "pillow", "starlette", "tqdm", "IPython", "pydantic", "aiohttp", "pyzmq",
    "partial-json-parser", "dill", "sentencepiece", "einops", "compressed-tensors", "gguf",
    "msgspec", "fastapi", "uvicorn",
)
LATER_DEPS: tuple[str, ...] = ("apache-tvm-ffi",)  # needed by releases after 0.5.14
READY_MARKER = ".workbench-ready.json"
_PIP_STEP = re.compile(r"^(Collecting|Downloading|Installing|Successfully|Processing|ERROR|"
                       r"Requirement already satisfied: (torch|triton|sglang))")


class EnvBuildError(RuntimeError):
    """An environment step failed; `missing` names the piece that could not be installed."""

    def __init__(self, step: str, missing: str, detail: str):
        super().__init__(f"{step}: {missing}: {detail}")
        self.step, self.missing, self.detail = step, missing, detail


@dataclass
class ReplayEnv:
    """A ready replay venv."""

    version: str
    root: Path
    python: Path
    cached: bool
    install_s: float
    packages: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    built_in_s: float | None = None  # how long the (possibly earlier) build took


def env_dir(version: str, cache_dir: Path) -> Path:
    """Where the venv for one release lives."""
    return cache_dir / f"sglang-{version}"


def dependency_specs(version: str, wheel: Path) -> list[str]:
    """The pip requirement strings installed before sglang itself (torch and triton aside)."""
    pins = wheel_requirements(wheel)
    names = list(IMPORT_DEPS)
    if Version(version) > Version("0.5.14"):
        names += LATER_DEPS
    return [pins.get(n.lower(), n) for n in names]


def _missing_from(output: str) -> str:
    for pattern in (r"No matching distribution found for (\S+)",
                    r"Could not find a version that satisfies the requirement (\S+)",
                    r"ResolutionImpossible.*?(\S+==\S+)"):
        found = re.search(pattern, output, re.S)
        if found:
            return found.group(1)
    return "unknown package (see detail)"


def _pip_install(python: Path, args: list[str], step: str, tag: str, log: Log) -> None:
    cmd = [str(python), "-m", "pip", "install", "--progress-bar", "off",
           "--disable-pip-version-check", *args]
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


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _installed_versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in "
            "('torch','triton','transformers','sglang','torchvision')}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def ensure_env(version: str, cache_dir: Path, log: Log = echo, rebuild: bool = False) -> ReplayEnv:
    """Build (or reuse) the replay venv for `version`; raises EnvBuildError naming what failed."""
    root = env_dir(version, cache_dir)
    python = root / "bin" / "python"
    marker = root / READY_MARKER
    tag = f"[sglang-{version}]"
    if marker.exists() and python.exists() and not rebuild:
        info = json.loads(marker.read_text())
        log(f"{tag} reusing cached venv {root}")
        return ReplayEnv(version, root, python, True, 0.0, info.get("packages", {}),
                         info.get("notes", []), info.get("install_s"))
    start = time.perf_counter()
    try:
        wheel, _ = ensure_wheel(version, cache_dir, log)
    except RuntimeError as exc:
        raise EnvBuildError("download", f"sglang=={version}", str(exc)) from None
    if root.exists():
        shutil.rmtree(root)
    log(f"{tag} creating venv {root}")
    made = subprocess.run([sys.executable, "-m", "venv", str(root)], capture_output=True, text=True)
    if made.returncode != 0:
        raise EnvBuildError("venv", f"{sys.executable} -m venv", made.stderr.strip()[-300:])
    _pip_install(python, [TORCH_PIN], "torch", tag, log)
    _pip_install(python, [TRITON_PIN, *dependency_specs(version, wheel)], "imports", tag, log)
    _pip_install(python, ["--no-deps", str(wheel)], "sglang", tag, log)
    write_standin(_site_packages(python))
    log(f"{tag} {STANDIN_NOTE}")
    notes = [STANDIN_NOTE]
    packages = _installed_versions(python)
    install_s = round(time.perf_counter() - start, 1)
    marker.write_text(json.dumps({"version": version, "packages": packages, "notes": notes,
                                  "install_s": install_s, "wheel": wheel.name}, indent=1))
    log(f"{tag} venv ready in {install_s:.1f} s")
    return ReplayEnv(version, root, python, False, install_s, packages, notes, install_s)
