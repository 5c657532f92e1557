"""How a run names its backend: the backend with the kernel that computed it (stand-ins and the
Triton interpreter said so), and the canonical backend order. Data about a record, not rendering:
the experiments' rows, the notebook gate and every view and plot label read the same names."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.run.record import RunRecord

# These backends compute with torch stand-ins of their libraries' kernels on every machine (docs/design.md §3).
STAND_IN_ON_CPU = {"flashinfer": "torch stand-in", "fa3": "torch stand-in"}
BACKEND_ORDER = ("triton", "flashinfer", "fa3", "torch_native")


def backend_label(backend: str, stand_in: bool | None = None, interpreter: bool | None = None, sep: str = "\n") -> str:
    """``flashinfer\\n(torch stand-in)``, ``triton\\n(interpreter)``, or the bare name.

    ``stand_in`` None (no record said) falls back to what the backend always is (flashinfer, fa3: stand-ins)."""
    if stand_in is None:
        stand_in = backend in STAND_IN_ON_CPU
    if stand_in:
        return f"{backend}{sep}(torch stand-in)"
    if interpreter:
        return f"{backend}{sep}(Triton interpreter)"
    return backend


def record_label(record: RunRecord | dict, sep: str = "\n") -> str:
    """The backend label of a run record (or its JSON form, as a notebook record holds it), from its
    config.kernel_stand_in and config.kernel.

    The kernel label, not env.triton_interpret: DP runs record the env of the parent process, which
    never imports the kernels."""
    cfg = record.get("config", {}) if isinstance(record, dict) else record.config
    backend = cfg.get("backend", "?")
    interp = backend == "triton" and "interpreter" in str(cfg.get("kernel") or "")
    return backend_label(backend, cfg.get("kernel_stand_in"), interp, sep)


def backend_sort_key(backend: str) -> tuple:
    """Canonical backend order, unknown names last."""
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend)
