"""Shared pieces of the plots: grouping records by backend label (``workbench.run.labels``, which names
stand-in kernels), figures built without pyplot, saving, and showing a figure in a notebook."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

from matplotlib.figure import Figure

from workbench.run.labels import backend_sort_key, record_label
from workbench.run.record import RecordLike, record_json

LINE_STYLES = (("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--"))  # lines stay apart
STATUS_COLORS = {"ok": "#4caf50", "crashed": "#e53935", "timeout": "#fb8c00", "error": "#8e24aa", None: "#eeeeee"}


def group_by_backend(
    records: Iterable[RecordLike], mode: str | None = "eagle", ok_only: bool = True
) -> dict[str, list[dict]]:
    """Records keyed by backend label, in the canonical backend order; ``mode`` None keeps both modes.
    The plots read JSON forms (a notebook record's runs, which the nightly draws); a ``RunRecord`` or
    ``RunResult`` is drawn by its JSON form."""
    groups: dict[str, list[dict]] = {}
    keyed = []
    for r in map(record_json, records):
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


def show(fig: Figure) -> None:
    """Display ``fig`` as PNG in a notebook (works without pyplot and in papermill)."""
    from IPython.display import Image, display  # IPython only where a figure is shown, not where one is saved

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    display(Image(data=buf.getvalue()))
