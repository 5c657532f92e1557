"""Plots of the contract survey: a release x fact heatmap-table, saved as PNG and SVG."""

from __future__ import annotations

from pathlib import Path

from workbench.upstream.static.survey import BUG, FINE, NA, RISK

_COLORS = {NA: "#d9d9d9", FINE: "#a6d96a", RISK: "#fdae61", BUG: "#d7191c"}
_LEGEND = {
    NA: "not applicable / absent",
    FINE: "fine",
    RISK: "reads without getattr (risk)",
    BUG: "regression (class lacks kv_indptr)",
}


def plot_survey(result: dict, out_dir: Path, stem: str = "upstream_survey") -> list[Path]:
    """Draw the survey's fact table as a coloured grid; return the PNG and SVG paths.

    Uses a bare matplotlib Figure, so it leaves pyplot's backend and state alone.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    versions, facts = result["versions"], result["fact_names"]
    cells = [[result["releases"][v]["facts"][f] for v in versions] for f in facts]
    levels = sorted(_COLORS)
    grid = [[levels.index(c["severity"]) for c in row] for row in cells]
    fig = Figure(figsize=(2.4 + 1.35 * len(versions), 1.0 + 0.42 * len(facts)))
    ax = fig.subplots()
    ax.imshow(grid, cmap=ListedColormap([_COLORS[k] for k in levels]), vmin=-0.5, vmax=len(levels) - 0.5, aspect="auto")
    for i, row in enumerate(cells):
        for j, cell in enumerate(row):
            ax.text(
                j,
                i,
                cell["text"],
                ha="center",
                va="center",
                fontsize=8,
                color="white" if cell["severity"] == BUG else "black",
            )
    ax.set_xticks(range(len(versions)), [f"sglang {v}" for v in versions], fontsize=8)
    ax.set_yticks(range(len(facts)), facts, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_xticks([x - 0.5 for x in range(1, len(versions))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, len(facts))], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    ax.set_title(f"Static survey of sglang wheels: who declares / reads {result['field']}", fontsize=10, pad=28)
    ax.legend(
        handles=[Patch(color=_COLORS[k], label=_LEGEND[k]) for k in levels],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=2,
        fontsize=7,
        frameon=False,
    )
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    for path in paths:
        fig.savefig(path, dpi=150 if path.suffix == ".png" else None, bbox_inches="tight")
    return paths
