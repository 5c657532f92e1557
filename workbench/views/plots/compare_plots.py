"""Plots of a ``workbench compare`` document: tokens/s with every repeat and its interval, speedup
intervals, ``init_forward_metadata`` cost per forward mode, attention apart from the rest of a forward."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from workbench.views.plots.common import empty, new_figure, save

MODE_COLORS = {"greedy": "#757575", "eagle": "#1e88e5"}


def _err(s: dict | None, scale: float = 1.0):
    if not s:
        return float("nan"), [[0.0], [0.0]]
    m = s["median"] * scale
    return m, [[m - s["ci"][0] * scale], [s["ci"][1] * scale - m]]


def tokens_per_s_spread(doc: dict, path: str | Path | None = None) -> Figure:
    """One panel per dp size: each repeat as a dot, the median with its order-statistic interval as a bar."""
    dps = doc["dps"]
    fig = new_figure(max(6.5, 2.2 * len(doc["backends"]) * len(dps)), 4.0)
    axes = fig.subplots(1, len(dps), squeeze=False, sharey=True)[0]
    for ax, dp in zip(axes, dps, strict=False):
        rows = [r for r in doc["rows"] if r["dp"] == dp]
        labels = list(dict.fromkeys(r["label"] for r in rows))
        for r in rows:
            x = labels.index(r["label"]) + (-0.15 if r["mode"] == "greedy" else 0.15)
            ax.scatter(
                [x + 0.02 * (i - len(r["tokens_per_s_values"]) / 2) for i in range(len(r["tokens_per_s_values"]))],
                r["tokens_per_s_values"],
                s=10,
                color=MODE_COLORS[r["mode"]],
                alpha=0.5,
            )
            m, e = _err(r["tokens_per_s"])
            ax.errorbar(
                [x],
                [m],
                yerr=e,
                fmt="_",
                markersize=14,
                capsize=4,
                color=MODE_COLORS[r["mode"]],
                label=r["mode"] if r is rows[0] or r is rows[1] else None,
            )
        ax.set_xticks(range(len(labels)), [lbl.replace(" (", "\n(") for lbl in labels], fontsize=7.5)
        ax.set_yscale("log")
        ax.set_title(f"dp {dp}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("tokens/s, generation only (log)")
    axes[0].legend(fontsize=8, title="mode (dots: repeats)")
    cov = _coverage(doc["rows"][0]["tokens_per_s"]) if doc["rows"] else ""
    fig.suptitle(
        f"Tokens/s per backend: {doc['repeats']} paired repeats, median with its order-statistic interval{cov}",
        fontsize=10,
    )
    save(fig, path)
    return fig


def speedup_intervals(doc: dict, path: str | Path | None = None) -> Figure:
    """EAGLE3 over greedy tokens/s per backend and dp: the median per-repeat ratio with its interval; 1.0 marked."""
    items = [s for s in doc["speedup"] if s["speedup"]]
    if not items:
        return _nothing("no speedup: greedy and EAGLE3 were not both run", path)
    fig = new_figure(6.4, 0.5 * len(items) + 1.6)
    ax = fig.add_subplot()
    for i, s in enumerate(items):
        m, e = _err(s["speedup"])
        ax.errorbar([m], [i], xerr=e, fmt="o", capsize=4, color="#1e88e5" if s["lossless"] else "#e53935")
        ax.text(e[1][0] + m, i, f"  {m:.2f}x {s['verdict']['verdict']}", va="center", fontsize=8)
    ax.axvline(1.0, color="#555555", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(items)), [f"{s['label']} dp{s['dp']}" for s in items], fontsize=8)
    ax.set_xlabel("EAGLE3 tokens/s / greedy tokens/s (red: outputs differ)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(
        f"EAGLE3 / greedy per repeat: median, order-statistic interval{_coverage(items[0]['speedup'])}", fontsize=10
    )
    save(fig, path)
    return fig


def _coverage(s: dict | None) -> str:
    """`` (exact coverage 96.9 %, n = 6)`` for a title."""
    return f" (exact coverage {100 * s['coverage']:.1f} %, n = {s['n']})" if s else ""


def _nothing(message: str, path: str | Path | None) -> Figure:
    fig = empty(new_figure(6, 2.5), message)
    save(fig, path)
    return fig


def _eagle_rows(doc: dict, dp: int, field: str):
    """EAGLE3 rows at ``dp`` and the model/forward-mode keys of ``field`` they hold, in first-seen order."""
    rows = [r for r in doc["rows"] if r["mode"] == "eagle" and r["dp"] == dp]
    return rows, list(dict.fromkeys(k for r in rows for k in r[field]))


def _offsets(i: int, n: int, count: int) -> list[float]:
    width = 0.8 / n
    return [j + (i - (n - 1) / 2) * width for j in range(count)]


def metadata_cost(doc: dict, path: str | Path | None = None, dp: int = 1) -> Figure:
    """``init_forward_metadata`` per call (ms, median of per-run medians with its order-statistic
    interval) per backend and forward mode."""
    rows, keys = _eagle_rows(doc, dp, "metadata_ms")
    if not keys:
        return _nothing("no init_forward_metadata samples of EAGLE3 runs", path)
    fig = new_figure(max(6.5, 1.3 * len(keys)), 4.0)
    ax = fig.add_subplot()
    for i, r in enumerate(rows):
        errs = [_err(r["metadata_ms"].get(k)) for k in keys]
        ax.bar(
            _offsets(i, len(rows), len(keys)),
            [m for m, _ in errs],
            width=0.8 / len(rows),
            capsize=2,
            yerr=[[e[0][0] for _, e in errs], [e[1][0] for _, e in errs]],
            label=r["label"],
        )
    ax.set_xticks(range(len(keys)), [k.replace("/", "\n") for k in keys], fontsize=7.5)
    ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylabel("ms per init_forward_metadata call (log)")
    ax.set_xlabel("model / forward mode")
    ax.legend(fontsize=7.5, title="backend")
    ax.set_title(f"Metadata cost per backend and forward mode (EAGLE3 runs, dp {dp})", fontsize=10)
    save(fig, path)
    return fig


def attention_split(doc: dict, path: str | Path | None = None, dp: int = 1) -> Figure:
    """Per forward (ms): attention (KV write + kernel, all layers) against the rest, per backend and forward mode."""
    rows, keys = _eagle_rows(doc, dp, "forward_ms")
    if not keys:
        return _nothing("no EAGLE3 forward samples", path)
    fig = new_figure(max(6.5, 1.6 * len(keys)), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        xs = _offsets(i, len(rows), len(keys))
        att = [(r["attention_ms"].get(k) or {}).get("median", 0.0) for k in keys]
        total = [(r["forward_ms"].get(k) or {}).get("median", 0.0) for k in keys]
        bars = ax.bar(xs, att, width=width, label=f"{r['label']}: attention")
        ax.bar(
            xs,
            [max(0.0, t - a) for t, a in zip(total, att, strict=False)],
            width=width,
            bottom=att,
            alpha=0.35,
            color=bars.patches[0].get_facecolor(),
            hatch="//",
            label=f"{r['label']}: rest of the forward",
        )
    ax.set_xticks(range(len(keys)), [k.replace("/", "\n") for k in keys], fontsize=7.5)
    ax.set_yscale("log")
    smallest = [(r["attention_ms"].get(k) or {}).get("median") for r in rows for k in keys]
    ax.set_ylim(bottom=0.5 * min([v for v in smallest if v] or [1e-3]))
    ax.set_ylabel("ms per forward, median (log)")
    ax.legend(fontsize=6.5, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"Attention vs the rest of each forward (EAGLE3 runs, dp {dp})", fontsize=10)
    save(fig, path)
    return fig
