"""The view of a ``workbench upstream explore`` result: one row per cell (``explore_table``) and a
stand-alone HTML page of it (``explore_html``), with the provenance above the table; and the upstream-ready
reports of the crashes it found (``reports_table``)."""

from __future__ import annotations

import contextlib
import html
import sys
from collections.abc import Callable, Iterator

from tqdm import tqdm

from workbench.views.tables import Table

COLUMNS = ("cell", "verdict", "where", "reason", "known", "reproducer", "s")


def _where(cell: dict) -> str | None:
    c = cell.get("crash")
    if not c:
        return None
    return f"rank {c['rank']} {c['phase']} {c['forward_mode']} bs {c['batch_size']} {c['file']}:{c['line']}"


def explore_table(result: dict) -> Table:
    """One row per cell: verdict, where it crashed (rank, pass, mode, batch, file:line), why, known, reproducer."""
    rows = [
        {
            "cell": c["key"],
            "verdict": c["verdict"],
            "where": _where(c),
            "reason": c["reason"],
            "known": None if c.get("known") is None else ("known" if c["known"] else "NEW"),
            "reproducer": c.get("reproducer"),
            "s": c.get("wall_s"),
        }
        for c in result["cells"]
    ]
    return Table(rows, COLUMNS)


SUMMARY_COLUMNS = ("algorithm", "ok", "crashed", "limit", "failed", "run")


def explore_summary(result: dict) -> Table:
    """One row per speculative algorithm (``*``: the backend limits, which hold for every algorithm): how
    many of its cells got each verdict, and how many of them were run (the others were decided without a run)."""
    order = list(dict.fromkeys(c["algorithm"] for c in result["cells"]))
    rows = []
    for alg in order:
        cells = [c for c in result["cells"] if c["algorithm"] == alg]
        row = {"algorithm": alg, **{o: sum(1 for c in cells if c["verdict"] == o) for o in SUMMARY_COLUMNS[1:5]}}
        row["run"] = sum(1 for c in cells if c.get("record") is not None)
        rows.append(row)
    return Table(rows, SUMMARY_COLUMNS)


def explore_html(result: dict) -> str:
    """A stand-alone HTML page: the release, the provenance, the counts and the cell table."""
    p = result.get("provenance") or {}
    facts = "".join(
        f"<li>{html.escape(k)}: {html.escape(str(v))}</li>"
        for k, v in (
            ("sglang", result["sglang"]),
            ("generated", p.get("generated_at")),
            ("command", p.get("command")),
            ("commit", p.get("commit")),
            ("load at start", p.get("load_at_start")),
            ("wall s", result.get("wall_s")),
            ("counts", result.get("counts")),
        )
    )
    title = f"sglang {html.escape(result['sglang'])}: the real runtime explored"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
        f"<h1>{title}</h1><ul>{facts}</ul>{explore_summary(result)._repr_html_()}"
        f"{explore_table(result)._repr_html_()}</body></html>\n"
    )


@contextlib.contextmanager
def cell_progress(desc: str) -> Iterator[tuple[Callable, Callable, Callable]]:
    """A tqdm bar over an exploration's cells on stderr; yields ``(progress(cell), on_cells(n), log(line))``:
    one tick per finished cell (its key and verdict shown), the cell count once known, and a log line
    printed above the bar."""
    bar = tqdm(desc=desc, unit="cell", file=sys.stderr)

    def progress(cell) -> None:
        bar.update(1)
        bar.set_postfix_str(f"{cell.key}: {cell.verdict}")

    def on_cells(n: int) -> None:
        bar.total = n
        bar.refresh()

    def log(line) -> None:
        tqdm.write(str(line), file=sys.stderr)

    try:
        yield progress, on_cells, log
    finally:
        bar.close()


REPORT_COLUMNS = ("report", "as released", "raised at", "fix", "fixed run", "equal to HF", "equal to", "GPU tested")


def reports_table(reports: list[dict]) -> Table:
    """One row per upstream-ready report (``report.load_reports``): the crash as released (rank, pass, mode,
    batch size, line), the file its fix changes, the fixed run's status and equality, and whether its GPU
    server command was run (never, by the workbench)."""
    rows = []
    for r in reports:
        c = r["runs"]["as released"].get("crash") or {}
        fixed = r["runs"]["fixed"]
        fc = fixed.get("crash")
        rows.append(
            {
                "report": r["folder"],
                "as released": f"{r['runs']['as released']['status']}: rank {c.get('rank')} {c.get('phase')} "
                f"{c.get('forward_mode')} bs {c.get('batch_size')}"
                if c
                else r["runs"]["as released"]["status"],
                "raised at": c.get("raised_at"),
                "fix": ", ".join(r.get("fix_files") or []),
                "fixed run": fixed["status"] + (f" at {fc['raised_at']}" if fc else ""),
                "equal to HF": fixed.get("reference_equal"),
                "equal to": f"{r.get('compared_with', 'dp 1')}: {r.get('fixed_equals_dp1')}",
                "GPU tested": "yes" if r.get("server_command_tested_on_gpu") else "no",
            }
        )
    return Table(rows, REPORT_COLUMNS)
