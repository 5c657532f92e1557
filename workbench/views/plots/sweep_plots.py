"""Plot of an acceptance sweep: accept length per setting and acceptance per draft position,
one line per group of backends with identical results (per dtype)."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from workbench.experiments.sweep import groups, provenance
from workbench.views.plots.common import LINE_STYLES, empty, new_figure, save


def acceptance_sweep(doc: dict, path: str | Path | None = None) -> Figure:
    """Left: mean accept length per (steps, topk, draft_tokens); right: acceptance per draft position."""
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    if not rows:
        fig = empty(new_figure(6, 2.5), "no successful sweep runs")
        save(fig, path)
        return fig
    settings = list(dict.fromkeys(tuple(r["setting"]) for r in rows))
    fig = new_figure(12, 4.6)
    left, right = fig.subplots(1, 2)
    merged = sorted(groups(rows), key=lambda g: g["dtype"] != "float32")  # float32 first: the right panel's curves
    series = {}
    for g in merged:
        name = f"{g['dtype']}: {' = '.join(g['labels'])}"
        series.setdefault(name, {})[tuple(g["setting"])] = g
    for i, (name, by_setting) in enumerate(series.items()):
        marker, line = LINE_STYLES[i % len(LINE_STYLES)]
        xs = [j for j, s in enumerate(settings) if s in by_setting]
        left.plot(
            xs, [by_setting[settings[j]]["accept_length_mean"] for j in xs], marker=marker, linestyle=line, label=name
        )
    left.set_xticks(range(len(settings)), [f"({s},{k},{d})" for s, k, d in settings], fontsize=8)
    left.set_xlabel("(steps, topk, draft_tokens)")
    left.set_ylabel("mean accept length (tokens per verify step)")
    left.grid(alpha=0.3)
    left.legend(fontsize=7)
    first = next(iter(series.values()))
    for j, s in enumerate(settings):
        g = first.get(s)
        if not g or not g["acceptance_per_position"]:
            continue
        marker, line = LINE_STYLES[j % len(LINE_STYLES)]
        ys = g["acceptance_per_position"]
        right.plot(range(1, len(ys) + 1), ys, marker=marker, linestyle=line, label=f"({s[0]},{s[1]},{s[2]})")
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("draft position (tree depth)")
    right.set_ylabel("share of verify steps reaching the depth")
    right.xaxis.get_major_locator().set_params(integer=True)
    right.grid(alpha=0.3)
    right.legend(fontsize=7, title=next(iter(series)), title_fontsize=7)
    fig.suptitle(f"EAGLE3 acceptance sweep\n{provenance(doc)}", fontsize=9)
    save(fig, path)
    return fig
