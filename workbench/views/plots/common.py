"""Shared pieces of the plots: backend labels that name stand-in kernels, record accessors, saving."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from matplotlib.figure import Figure

# On a machine without their packages these backends compute with torch references (docs/design.md §3).
STAND_IN_ON_CPU = {"flashinfer": "torch stand-in", "fa3": "torch stand-in"}
BACKEND_ORDER = ("triton", "flashinfer", "fa3", "torch_native")
LINE_STYLES = (("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--"))  # lines stay apart
STATUS_COLORS = {"ok": "#4caf50", "crashed": "#e53935", "timeout": "#fb8c00", "error": "#8e24aa", None: "#eeeeee"}


def backend_label(backend: str, stand_in: bool | None = None, interpreter: bool | None = None, sep: str = "\n") -> str:
    """``flashinfer\\n(torch stand-in)``, ``triton\\n(interpreter)``, or the bare name.

    ``stand_in`` None (no record said) falls back to what the backend is on a CPU machine."""
    if stand_in is None:
        stand_in = backend in STAND_IN_ON_CPU
    if stand_in:
        return f"{backend}{sep}(torch stand-in)"
    if interpreter:
        return f"{backend}{sep}(Triton interpreter)"
    return backend


def record_label(record: dict, sep: str = "\n") -> str:
    """The backend label of a run record, from its config.kernel_stand_in and config.kernel.

    The kernel label, not env.triton_interpret: DP runs record the env of the parent process, which
    never imports the kernels."""
    cfg = record.get("config", {})
    backend = cfg.get("backend", "?")
    interp = backend == "triton" and "interpreter" in str(cfg.get("kernel") or "")
    return backend_label(backend, cfg.get("kernel_stand_in"), interp, sep)


def backend_sort_key(backend: str) -> tuple:
    """Canonical backend order, unknown names last."""
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend)


def group_by_backend(
    records: Iterable[dict], mode: str | None = "eagle", ok_only: bool = True
) -> dict[str, list[dict]]:
    """Records keyed by backend label, in the canonical backend order; ``mode`` None keeps both modes."""
    groups: dict[str, list[dict]] = {}
    keyed = []
    for r in records:
        cfg = r.get("config", {})
        if (mode and cfg.get("mode", "eagle") != mode) or (ok_only and r.get("status") != "ok"):
            continue
        keyed.append((backend_sort_key(cfg.get("backend", "?")), record_label(r), r))
    for _, label, r in sorted(keyed, key=lambda t: t[0]):
        groups.setdefault(label, []).append(r)
    return groups


def new_figure(width: float, height: float) -> Figure:
    """A pyplot-free figure: safe under any backend (Agg included) and in threads."""
    return Figure(figsize=(width, height), layout="constrained")


def empty(fig: Figure, message: str) -> Figure:
    """A figure that says why there is nothing to plot."""
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=11, color="#555555", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def save(fig: Figure, path: str | Path | None) -> list[Path]:
    """Write ``path`` as .png and .svg (suffix replaced); nothing when ``path`` is None."""
    if path is None:
        return []
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for ext in (".png", ".svg"):
        target = base.with_suffix(ext)
        fig.savefig(target, dpi=110 if ext == ".png" else None)
        out.append(target)
    return out
