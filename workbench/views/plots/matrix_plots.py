"""The crash matrix: revision x backend, one panel per DP size, each cell ok / crashed (exception);
given the nightly's verdicts, each cell also says whether it ended as expected."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from workbench.run.labels import backend_label, backend_sort_key, record_label
from workbench.run.record import RecordLike, record_json
from workbench.views.plots.common import STATUS_COLORS, empty, new_figure, save

REVISION_ORDER = ("pre-24860", "pr-24860", "pr-28221")
FIXED_SUFFIX = " + apply_fix()"
SEVERITY = {"ok": 0, "timeout": 2, "error": 2, "crashed": 3}
NOT_RUN = "#bdbdbd"
UNEXPECTED_EDGE = "#b71c1c"


def _row(cfg: dict) -> str:
    return cfg["revision"] + (FIXED_SUFFIX if cfg.get("apply_fix_in_place") else "")


def _row_key(row: str) -> tuple:
    base = row.replace(FIXED_SUFFIX, "")
    return (REVISION_ORDER.index(base) if base in REVISION_ORDER else len(REVISION_ORDER), row)


def _cell_text(rec: dict) -> str:
    crash = rec.get("crash") or {}
    if rec.get("status") == "ok":
        return "ok"
    lines = [rec.get("status", "?"), crash.get("exception_type") or ""]
    if crash.get("rank") is not None:
        lines.append(f"rank {crash['rank']} {crash.get('phase') or ''}".strip())
    if crash.get("forward_mode"):
        lines.append(str(crash["forward_mode"]))
    return "\n".join(line for line in lines if line)


def _panel_title(dp: int, recs: list) -> str:
    if dp == 1:
        return "dp = 1 (no DP attention: idle batches are empty)"
    idle = any(not a for r in recs for a in (r.get("dp") or {}).get("assignment", [[0]]))
    return f"dp = {dp} (DP attention" + (", a rank idle: padded IDLE batches)" if idle else ")")


def crash_matrix(
    records: Iterable[RecordLike],
    path: str | Path | None = None,
    title: str = "EAGLE3 + DP attention: where the run crashes",
    as_expected: Sequence[bool | None] | None = None,
) -> Figure:
    """Cells colored by run status with the exception name; greedy runs are left out (no draft-extend).

    ``as_expected`` (one entry per record: True, False, or None for no expectation) marks each cell
    "as expected" or, framed in red, "UNEXPECTED" (any unexpected run of a cell makes it so)."""
    records = [record_json(r) for r in records]  # run records or their JSON forms (a notebook record's)
    marks = list(as_expected) if as_expected is not None else [None] * len(records)
    if len(marks) != len(records):
        raise ValueError(f"as_expected has {len(marks)} entries for {len(records)} records")
    cells: dict[tuple[int, str, str], dict] = {}
    verdicts: dict[tuple[int, str, str], bool] = {}
    labels: dict[str, str] = {}  # from a record that names its kernel (a setup crash may not)
    for rec, mark in zip(records, marks, strict=False):
        cfg = rec.get("config", {})
        if cfg.get("mode", "eagle") != "eagle" or "revision" not in cfg:
            continue
        key = (int(cfg.get("dp", 1)), _row(cfg), cfg["backend"])
        if key not in cells or SEVERITY.get(rec.get("status"), 1) > SEVERITY.get(cells[key].get("status"), 1):
            cells[key] = rec  # several runs of one cell: the worst status shows
        if mark is not None:
            verdicts[key] = verdicts.get(key, True) and bool(mark)
        if cfg.get("kernel") is not None:
            labels[cfg["backend"]] = record_label(rec)
    if not cells:
        fig = empty(new_figure(6, 2.5), "no EAGLE3 runs to show")
        save(fig, path)
        return fig
    dps = sorted({k[0] for k in cells})
    rows = sorted({k[1] for k in cells}, key=_row_key)
    cols = sorted({k[2] for k in cells}, key=backend_sort_key)
    fig = new_figure(2.0 + 1.7 * len(cols) * len(dps), 1.2 + 0.95 * len(rows))
    axes = fig.subplots(1, len(dps), squeeze=False)[0]
    for ax, dp in zip(axes, dps, strict=False):
        for i, row in enumerate(rows):
            for j, col in enumerate(cols):
                rec = cells.get((dp, row, col))
                status = rec.get("status") if rec else None
                verdict = verdicts.get((dp, row, col))
                ax.add_patch(
                    Rectangle(
                        (j, i),
                        1,
                        1,
                        facecolor=STATUS_COLORS.get(status, NOT_RUN),
                        edgecolor=UNEXPECTED_EDGE if verdict is False else "white",
                        linewidth=5 if verdict is False else 2,
                    )
                )
                text = _cell_text(rec) if rec else "not run"
                if verdict is not None:
                    text += "\nas expected" if verdict else "\nUNEXPECTED"
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    text,
                    ha="center",
                    va="center",
                    fontsize=7.5,
                    color="white" if status in ("ok", "crashed", "error") else "black",
                )
        ax.set_xlim(0, len(cols))
        ax.set_ylim(len(rows), 0)
        ax.set_xticks(
            [j + 0.5 for j in range(len(cols))], [labels.get(c) or backend_label(c) for c in cols], fontsize=8
        )
        ax.set_yticks([i + 0.5 for i in range(len(rows))], rows if ax is axes[0] else [""] * len(rows), fontsize=8)
        ax.tick_params(length=0)
        ax.set_xlabel("attention backend")
        if ax is axes[0]:
            ax.set_ylabel("code revision")
        ax.set_title(_panel_title(dp, [r for k, r in cells.items() if k[0] == dp]), fontsize=9)
        for spine in ax.spines.values():
            spine.set_visible(False)
    handles = [Patch(color=STATUS_COLORS[s], label=s) for s in ("ok", "crashed", "timeout", "error")]
    handles.append(Patch(color=NOT_RUN, label="not run"))
    if verdicts:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=UNEXPECTED_EDGE,
                linewidth=2,
                label="UNEXPECTED (red frame; others: as expected)",
            )
        )
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    save(fig, path)
    return fig
