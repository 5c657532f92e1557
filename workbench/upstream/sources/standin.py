"""A small import stand-in package named `torchvision`, written only into a replay venv.

PyPI's torchvision for torch 2.13 is a CUDA build that fails to import next to the
CPU torch; sglang and transformers import it at module level (`torchvision.io.decode_jpeg`,
`torchvision.transforms`, `InterpolationMode`) but nothing on the replay path touches
images. Every name resolves to a class that raises when used, so a real use fails loudly.
"""

from __future__ import annotations

from pathlib import Path

STANDIN_NOTE = "torchvision import stand-in used (PyPI's torchvision is a CUDA build; no image code runs)"
STANDIN_VERSION = "0.0.0+workbench.standin"

_HELPER = '''"""Helpers of the eagle-workbench torchvision import stand-in."""
import enum


class StandInError(RuntimeError):
    """Raised by any use of the stand-in: torchvision is not really installed here."""


def stub(qualname):
    def _fail(*args, **kwargs):
        raise StandInError(
            f"{qualname} is an eagle-workbench import stand-in; torchvision is not installed")
    return type(qualname.rsplit(".", 1)[-1], (), {
        "__init__": _fail, "__call__": _fail, "__module__": qualname.rsplit(".", 1)[0]})


def module_getattr(modname):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stub(f"{modname}.{name}")
    return __getattr__


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"
'''

_MODULE = '''"""eagle-workbench import stand-in for {name} (not the real torchvision)."""
from torchvision._standin import InterpolationMode, module_getattr
{extra}
__getattr__ = module_getattr(__name__)
'''

_SUBMODULES = (
    "io",
    "ops",
    "models",
    "datasets",
    "utils",
    "transforms/functional",
    "transforms/functional_tensor",
    "transforms/v2/functional",
)
_PACKAGES = ("transforms", "transforms/v2")


def _files() -> dict[str, str]:
    top = _MODULE.format(
        name="torchvision",
        extra=(
            f'__version__ = "{STANDIN_VERSION}"\nWORKBENCH_STANDIN = True\n'
            "from torchvision import io, transforms  # noqa: E402,F401\n"
        ),
    )
    files = {"torchvision/__init__.py": top, "torchvision/_standin.py": _HELPER}
    for sub in _SUBMODULES:
        files[f"torchvision/{sub}.py"] = _MODULE.format(name="torchvision." + sub.replace("/", "."), extra="")
    for pkg in _PACKAGES:
        extra = ""
        if pkg == "transforms":
            extra = "from torchvision.transforms import functional, v2  # noqa: F401\n"
        files[f"torchvision/{pkg}/__init__.py"] = _MODULE.format(
            name="torchvision." + pkg.replace("/", "."), extra=extra
        )
    meta = (
        f"Metadata-Version: 2.1\nName: torchvision\nVersion: {STANDIN_VERSION}\n"
        "Summary: eagle-workbench import stand-in (not the real torchvision)\n"
    )
    info = f"torchvision-{STANDIN_VERSION}.dist-info"
    files[f"{info}/METADATA"] = meta
    files[f"{info}/INSTALLER"] = "eagle-workbench\n"
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in sorted(files) if p.startswith("torchvision/"))
    return files


def write_standin(site_packages: Path) -> list[Path]:
    """Write the stand-in into `site_packages`; return the files written."""
    written = []
    for rel, text in _files().items():
        path = site_packages / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
