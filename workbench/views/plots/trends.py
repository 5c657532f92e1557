"""Comparisons that need several runs: EAGLE3 speedup over greedy, and the nightly history trend."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path

from matplotlib.figure import Figure

from workbench.views.plots.common import (
    LINE_STYLES,
    backend_label,
    backend_sort_key,
    empty,
    group_by_backend,
    new_figure,
    save,
)


def _pairs(records: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """Backend label -> (greedy tokens/s, EAGLE3 tokens/s) of ok runs with the same prompts, length, dp, revision."""
    runs: dict[tuple, dict[str, list[float]]] = {}
    for mode in ("greedy", "eagle"):
        for label, recs in group_by_backend(records, mode=mode).items():
            for r in recs:
                c = r["config"]
                key = (
                    label,
                    json.dumps(c.get("prompts")),
                    c.get("max_new_tokens"),
                    c.get("dp"),
                    c.get("revision"),
                    c.get("seed"),
                    c.get("model_dir"),
                )
                runs.setdefault(key, {}).setdefault(mode, []).append(r["metrics"]["tokens_per_s"])
    pairs: dict[str, list[tuple[float, float]]] = {}
    for key, by_mode in runs.items():
        if "greedy" in by_mode and "eagle" in by_mode:
            pairs.setdefault(key[0], []).append(
                (statistics.median(by_mode["greedy"]), statistics.median(by_mode["eagle"]))
            )
    return pairs


def speedup(records: Iterable[dict], path: str | Path | None = None) -> Figure:
    """EAGLE3 tokens/s over plain greedy tokens/s on the same backend, prompts, length, dp and revision
    (the median over such pairs)."""
    pairs = _pairs(list(records))
    order = {label: backend_sort_key(label.split("\n")[0]) for label in pairs}
    labels = sorted(pairs, key=order.get)
    if not labels:
        fig = empty(new_figure(6, 2.5), "needs an ok greedy and an ok EAGLE3 run with the same settings")
        save(fig, path)
        return fig
    tps = {b: (statistics.median(g for g, _ in pairs[b]), statistics.median(e for _, e in pairs[b])) for b in labels}
    ratios = [statistics.median(e / g for g, e in pairs[b]) for b in labels]
    fig = new_figure(max(5.0, 1.6 * len(labels) + 1.5), 4.2)
    ax = fig.add_subplot()
    bars = ax.bar(range(len(labels)), ratios, color=["#43a047" if x >= 1 else "#fb8c00" for x in ratios], width=0.6)
    for bar, b, x in zip(bars, labels, ratios, strict=False):
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            max(bar.get_height(), 1.0) + 0.02,
            f"{x:.2f}x\n{tps[b][1]:.1f} vs {tps[b][0]:.1f} tok/s",
            ha="center",
            va="bottom",
            fontsize=7.5,
        )
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="greedy baseline (1.0x)")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("backend")
    ax.set_ylabel("speedup (EAGLE3 tokens/s ÷ greedy tokens/s)")
    ax.set_ylim(0, max(ratios + [1.0]) * 1.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("EAGLE3 speedup over plain greedy decoding, per backend", fontsize=11)
    save(fig, path)
    return fig


def _series(rows: Iterable[dict], value) -> tuple[list[str], dict[str, dict[int, float]]]:
    nights: dict[int, str] = {}
    acc: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        v = value(row)
        nights[row["night_id"]] = row["night"]
        if v is None:
            continue
        label = backend_label(row["backend"], row.get("kernel_stand_in"), row.get("interpreter"), sep=" ")
        acc.setdefault(label, {}).setdefault(row["night_id"], []).append(v)
    order = sorted(nights)
    index = {n: i for i, n in enumerate(order)}
    series = {lab: {index[n]: statistics.mean(vs) for n, vs in per.items()} for lab, per in acc.items()}
    return [nights[n] for n in order], series


def history_trend(rows: Iterable[dict], path: str | Path | None = None) -> Figure:
    """Mean accept length and time per output token of ok EAGLE3 runs, per backend, over nights.

    ``rows``: history rows with night_id, night, backend, kernel_stand_in, interpreter, mode, status,
    accept_length_mean, tokens_per_s (see ``ci.history``)."""
    rows = [r for r in rows if r.get("mode") == "eagle" and r.get("status") == "ok"]
    if not rows:
        fig = empty(new_figure(6, 2.5), "no history yet")
        save(fig, path)
        return fig
    fig = new_figure(9.5, 4.0)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    panels = (
        ("mean accept length (tokens per verify step)", lambda r: r.get("accept_length_mean")),
        ("run wall time per output token (ms)", lambda r: 1000 / r["tokens_per_s"] if r.get("tokens_per_s") else None),
    )
    for ax, (ylabel, value) in zip(axes, panels, strict=False):
        nights, series = _series(rows, value)
        for i, label in enumerate(sorted(series, key=lambda lab: backend_sort_key(lab.split(" ")[0]))):
            pts = sorted(series[label].items())
            marker, line = LINE_STYLES[i % len(LINE_STYLES)]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, linestyle=line, label=label)
        step = max(1, len(nights) // 12)
        ax.set_xticks(range(0, len(nights), step), nights[::step], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("night")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(title="backend", fontsize=7.5)
    fig.suptitle("Nightly trend of ok EAGLE3 runs (mean over the night's runs per backend)", fontsize=11)
    save(fig, path)
    return fig
