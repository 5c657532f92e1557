"""Tables of run records for notebooks: ``Table`` (HTML in Jupyter, aligned text elsewhere), one row
per run (``summary_table``), one row per DP rank of where a run ended (``where_table``)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence

from workbench.run.labels import record_label
from workbench.run.record import RecordLike, as_record


class Table:
    """Rows of dicts shown as an HTML table in Jupyter and as aligned text elsewhere."""

    def __init__(self, rows: Sequence[dict], columns: Sequence[str] | None = None) -> None:
        self.rows = list(rows)
        self.columns = list(columns or (self.rows[0].keys() if self.rows else []))

    def _cells(self) -> list[list[str]]:
        return [["" if r.get(c) is None else str(r.get(c)) for c in self.columns] for r in self.rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self._cells()
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        cells = self._cells()
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=False))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) for row in cells]
        return "\n".join(lines)


def _fmt(x: float | None, digits: int = 2) -> str | None:
    return None if x is None else f"{x:.{digits}f}"


def summary_table(runs: Mapping[str, RecordLike] | Iterable[RecordLike]) -> Table:
    """One row per run: status, backend and kernel, revision, dp, the exception, accept length, tokens/s, hash."""
    items = runs.items() if isinstance(runs, Mapping) else ((str(i), r) for i, r in enumerate(runs))
    rows = []
    for role, run in items:
        rec = as_record(run)
        cfg, m, crash = rec.config, rec.metrics, rec.crash
        rows.append(
            {
                "run": role,
                "status": rec.status,
                "mode": cfg.get("mode"),
                "backend": record_label(rec, sep=" "),
                "kernel": cfg.get("kernel"),
                "revision": cfg["revision"] + (" + apply_fix()" if cfg.get("apply_fix_in_place") else ""),
                "dp": cfg["dp"],
                "exception": crash.exception_type if crash else None,
                "accept length": _fmt(m.get("accept_length_mean")),
                "tokens/s": _fmt(m.get("tokens_per_s"), 1),
                "outputs sha256": (rec.outputs_sha256 or "")[:16] or None,
            }
        )
    return Table(rows)


def where_table(run: RecordLike) -> Table:
    """Where the run was when it ended, per DP rank: assigned prompts, last forward pass, how it ended."""
    rec = as_record(run)
    crash, dp = rec.crash, rec.dp
    assignment = dp.assignment if dp else [list(range(len(rec.config.get("prompts") or [])))]
    last = dp.last_forward if dp else {}
    rows = []
    for rank, prompts in enumerate(assignment):
        fwd = last.get(str(rank)) or {}
        crashed_here = crash is not None and crash.rank == rank
        if crashed_here:
            fwd = {"phase": crash.phase, "forward_mode": crash.forward_mode, "batch_size": crash.batch_size}
        rows.append(
            {
                "rank": rank,
                "prompts": len(prompts),
                "idle": "yes" if not prompts else "no",
                "phase": fwd.get("phase"),
                "forward mode": fwd.get("forward_mode"),
                "batch size": fwd.get("batch_size"),
                "ended": f"{crash.exception_type}: {crash.message}"
                if crashed_here
                else ("stopped (another rank failed)" if crash else rec.status),
            }
        )
    return Table(rows)
