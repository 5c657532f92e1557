"""Per-run distributions across backends: phase latency, accept length, acceptance per draft position."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from matplotlib.figure import Figure

from workbench.run.record import RecordLike
from workbench.views.plots.common import LINE_STYLES, empty, group_by_backend, new_figure, save

PHASE_ORDER = ("prefill", "draft", "verify", "draft-extend", "decode")


def phase_latency(
    records: Iterable[RecordLike], path: str | Path | None = None, mode: str | None = "eagle", title: str | None = None
) -> Figure:
    """Box plots of per-forward latency samples (ms, log scale), one panel per phase, one box per backend."""
    groups = group_by_backend(records, mode=mode)
    phases = [p for p in PHASE_ORDER if any(r["metrics"]["latency_s"].get(p) for rs in groups.values() for r in rs)]
    if not phases:
        fig = empty(new_figure(6, 2.5), "no successful runs with latency samples")
        save(fig, path)
        return fig
    fig = new_figure(max(6.0, 1.15 * len(groups) * len(phases)), 4.2)
    axes = fig.subplots(1, len(phases), squeeze=False, sharey=True)[0]
    labels = list(groups)
    for ax, phase in zip(axes, phases, strict=False):
        data = [[1000 * s for r in groups[b] for s in r["metrics"]["latency_s"].get(phase, [])] for b in labels]
        ax.boxplot([d or [float("nan")] for d in data], tick_labels=labels, showfliers=True, widths=0.6)
        for i, d in enumerate(data):
            ax.text(
                i + 1, 0.02, f"n={len(d)}", transform=ax.get_xaxis_transform(), ha="center", fontsize=7, color="#555555"
            )
        ax.set_yscale("log")
        ax.set_title(phase, fontsize=10)
        ax.tick_params(axis="x", labelsize=7.5, rotation=0)
        ax.grid(axis="y", alpha=0.3)
        ax.set_xlabel("backend")
    axes[0].set_ylabel("latency per forward pass (ms, log scale)")
    fig.suptitle(
        title or f"Per-phase latency by backend ({mode or 'all modes'}; one sample per forward pass)", fontsize=11
    )
    save(fig, path)
    return fig


def accept_length_hist(records: Iterable[RecordLike], path: str | Path | None = None) -> Figure:
    """Histogram of accept length (accepted drafts + 1 bonus token per request per verify step), mean marked."""
    groups = group_by_backend(records)
    groups = {b: rs for b, rs in groups.items() if any(r["metrics"].get("accept_length_per_step") for r in rs)}
    if not groups:
        fig = empty(new_figure(6, 2.5), "no successful EAGLE3 runs with verify steps")
        save(fig, path)
        return fig
    fig = new_figure(max(5.0, 2.8 * len(groups)), 3.6)
    axes = fig.subplots(1, len(groups), squeeze=False, sharey=True)[0]
    for ax, (label, rs) in zip(axes, groups.items(), strict=False):
        lengths: list[int] = [a for r in rs for a in r["metrics"]["accept_length_per_step"]]
        top = max(max(lengths), max((r["config"].get("steps", 1) for r in rs), default=1) + 1)
        counts = Counter(lengths)
        xs = list(range(1, top + 1))
        ax.bar(xs, [counts.get(x, 0) / len(lengths) for x in xs], color="#1e88e5", width=0.8)
        ax.set_ylim(0, 1.15)
        mean = sum(lengths) / len(lengths)
        ax.axvline(
            mean,
            color="#e53935",
            linestyle="--",
            linewidth=1.5,
            label=f"mean {mean:.2f}\n(n={len(lengths)} verify steps)",
        )
        ax.set_xticks(xs)
        ax.set_title(label.replace("\n", " "), fontsize=9)
        ax.set_xlabel("accept length (tokens per verify step)")
        ax.legend(fontsize=8, loc="upper left")
    axes[0].set_ylabel("fraction of verify steps")
    fig.suptitle("EAGLE3 accept length per backend (greedy tree verification)", fontsize=11)
    save(fig, path)
    return fig


def acceptance_per_position(records: Iterable[RecordLike], path: str | Path | None = None) -> Figure:
    """Fraction of verify steps whose accepted path reaches draft depth d, per backend."""
    groups = group_by_backend(records)
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    drawn = False
    for i, (label, rs) in enumerate(groups.items()):
        series = [r["metrics"].get("acceptance_per_position") or [] for r in rs]
        weights = [r["metrics"].get("verify_steps") or 0 for r in rs]
        depth = max((len(s) for s in series), default=0)
        if not depth or not sum(weights):
            continue
        ys = [
            sum(w * s[d] for s, w in zip(series, weights, strict=False) if d < len(s) and s[d] is not None)
            / sum(weights)
            for d in range(depth)
        ]
        marker, line = LINE_STYLES[i % len(LINE_STYLES)]
        dodge = 0.04 * (i - (len(groups) - 1) / 2)  # identical curves stay visible side by side
        ax.plot(
            [d + 1 + dodge for d in range(depth)], ys, marker=marker, linestyle=line, label=label.replace("\n", " ")
        )
        drawn = True
    if not drawn:
        fig = empty(new_figure(6, 2.5), "no successful EAGLE3 runs with verify steps")
        save(fig, path)
        return fig
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("draft position (tree depth)")
    ax.set_ylabel("acceptance rate (fraction of verify steps)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(title="backend", fontsize=8)
    ax.set_title("EAGLE3 acceptance rate per draft position", fontsize=11)
    save(fig, path)
    return fig
