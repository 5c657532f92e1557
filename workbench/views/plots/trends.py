"""The nightly history trend: accept length and time per token over nights, one line per experiment.

A line is one ``params_hash`` (``workbench_ci.history.params_of``: the run settings, prompts and models, not
the backend), so a change of settings or models starts a new line, marked where it starts, instead of
a jump in an old one. Backends get lines of their own only inside such a group (where they ran the
same runs); backends whose series are identical share one line.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path

from matplotlib.figure import Figure

from workbench.run.labels import backend_label, backend_sort_key
from workbench.views.plots.common import LINE_STYLES, empty, new_figure, save


def _setting(row: dict) -> str:
    """A group's settings in a few words, from the row's stored params."""
    p = json.loads(row.get("params") or "{}")
    spec = f"({p.get('steps')},{p.get('topk')},{p.get('draft_tokens')})"
    return f"{spec} {p.get('max_new_tokens')} tok dp{p.get('dp')} {p.get('dtype', 'float32')}"


def _lines(rows: list[dict], value) -> tuple[list[str], dict[str, dict[int, float]], dict[str, int]]:
    """(night labels, line label -> {night index: mean value}, line label -> first night index).

    Lines: per params group, per backend inside it; backends with identical series merged."""
    nights = sorted({r["night_id"]: r["night"] for r in rows}.items())
    index = {nid: i for i, (nid, _) in enumerate(nights)}
    acc: dict[tuple[str, str], dict[int, list[float]]] = {}
    first_cell: dict[str, str] = {}
    setting: dict[str, str] = {}
    for r in rows:
        v = value(r)
        key = r.get("params_hash") or "unknown"
        first_cell.setdefault(key, r["cell"])
        setting.setdefault(key, _setting(r))
        if v is None:
            continue
        label = backend_label(r["backend"], r.get("kernel_stand_in"), r.get("interpreter"), sep=" ")
        acc.setdefault((key, label), {}).setdefault(index[r["night_id"]], []).append(v)
    series: dict[str, dict[int, float]] = {}
    by_group: dict[str, dict[str, dict[int, float]]] = {}
    for (key, label), per in acc.items():
        by_group.setdefault(key, {})[label] = {n: statistics.mean(vs) for n, vs in sorted(per.items())}
    for key, per_backend in by_group.items():
        merged: dict[tuple, list[str]] = {}
        for label in sorted(per_backend, key=lambda lab: backend_sort_key(lab.split(" ")[0])):
            merged.setdefault(tuple(sorted(per_backend[label].items())), []).append(label)
        for pts, labels in merged.items():
            name = f"{first_cell[key]} {setting[key]} [{key[:6]}]: {' = '.join(labels)}"
            series[name] = dict(pts)
    starts = {name: min(pts) for name, pts in series.items() if pts}
    return [label for _, label in nights], series, starts


def _changes(rows: list[dict]) -> dict[int, list[str]]:
    """Night index -> cells whose params_hash differs from that cell's previous night."""
    nights = sorted({r["night_id"] for r in rows})
    index = {nid: i for i, nid in enumerate(nights)}
    per_cell: dict[str, dict[int, set[str]]] = {}
    for r in rows:
        per_cell.setdefault(r["cell"], {}).setdefault(r["night_id"], set()).add(r.get("params_hash") or "unknown")
    out: dict[int, list[str]] = {}
    for cell, by_night in per_cell.items():
        seen = sorted(by_night)
        for before, now in zip(seen, seen[1:], strict=False):
            if by_night[now] != by_night[before]:
                out.setdefault(index[now], []).append(cell)
    return out


def history_trend(rows: Iterable[dict], path: str | Path | None = None) -> Figure:
    """Mean accept length and time per output token of the comparison cells' ok EAGLE3 runs (their
    repeats: roles ``mode/backend/dpN#i``), per experiment and backend, over nights; a vertical line
    marks each night where a cell's parameters or models changed. (Every other cell's accept length
    is checked against its own experiment's last night by ``workbench_ci.expect.check_accept_length``.)

    ``rows``: history rows with night_id, night, cell, role, backend, kernel_stand_in, interpreter,
    mode, status, accept_length_mean, tokens_per_s, params_hash, params (see ``workbench_ci.history``)."""
    rows = [r for r in rows if r.get("mode") == "eagle" and r.get("status") == "ok" and "#" in str(r.get("role"))]
    if not rows:
        fig = empty(new_figure(6, 2.5), "no history of comparison cells yet")
        save(fig, path)
        return fig
    fig = new_figure(12.0, 5.0)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    panels = (
        ("mean accept length (tokens per verify step)", lambda r: r.get("accept_length_mean")),
        ("ms per output token (generation only)", lambda r: 1000 / r["tokens_per_s"] if r["tokens_per_s"] else None),
    )
    changes = _changes(rows)
    for ax, (ylabel, value) in zip(axes, panels, strict=False):
        nights, series, starts = _lines(rows, value)
        for i, (name, pts) in enumerate(sorted(series.items(), key=lambda kv: (starts[kv[0]], kv[0]))):
            marker, line = LINE_STYLES[i % len(LINE_STYLES)]
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker=marker, linestyle=line, label=name)
        for night, cells in changes.items():
            ax.axvline(night - 0.5, color="#8e24aa", linestyle=":", linewidth=1)
            ax.text(
                night - 0.45,
                ax.get_ylim()[1],
                f"new params/models: {len(cells)} cell(s)",
                fontsize=6,
                va="top",
                rotation=90,
                color="#8e24aa",
            )
        step = max(1, len(nights) // 12)
        ax.set_xticks(range(0, len(nights), step), nights[::step], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("night")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=5.5, loc="best")
    fig.suptitle(
        "Nightly trend of the comparison cells' EAGLE3 runs: one line per experiment (settings, prompts, "
        "models) and backend; a new experiment starts a new line",
        fontsize=9,
    )
    save(fig, path)
    return fig
