"""The nightly report: ``summary.json`` and a self-contained ``report.html`` that opens with the verdict
and the crash matrix, then the results table (each executed notebook linked as an HTML page, its
``.ipynb`` beside it), output parity and the plots; ``junit.xml`` and ``summary.md`` beside it."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from workbench.run.labels import record_label
from workbench.run.serialise import to_dict
from workbench.views import plots
from workbench.views.comparison import comparison_section, headlines
from workbench_ci.expect import describe, describe_expect, parity_groups
from workbench_ci.publish import shipped_note, write_junit, write_markdown
from workbench_ci.results import CellResult
from workbench_ci.upstream_lane import lane_section

CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}th{background:#f5f5f5}
.expected{background:#e8f5e9}.unexpected{background:#ffebee}.banner{padding:10px 14px;font-size:16px;margin:12px 0}
img{max-width:100%;border:1px solid #eee;margin:6px 0}code{font-size:11px}
.why{color:#b71c1c}.shipped{color:#6d4c00;font-size:11px}"""


def _records(cells: list[CellResult]) -> list[dict]:
    """The engine's run records (the plots' input); upstream replays and check records are
    reported in the results table only."""
    return [rec for c in cells for rec in c.runs().values() if "revision" in (rec.get("config") or {})]


def _as_expected(c: CellResult, role: str) -> bool:
    """A run of an unexpected cell is unexpected when a reason names it, or when no reason names any run."""
    if c.verdict == "expected":
        return True
    named = [r for r in c.reasons if re.search(r"run '[^']+'", r)]
    return not (any(f"run {role!r}" in r for r in named) or len(named) < len(c.reasons))


def _marked_records(cells: list[CellResult]) -> tuple[list[dict], list[bool]]:
    pairs = [
        (rec, _as_expected(c, role))
        for c in cells
        for role, rec in c.runs().items()
        if "revision" in (rec.get("config") or {})
    ]
    return [r for r, _ in pairs], [m for _, m in pairs]


MATRIX_TITLE = "Crash matrix (revision × backend, per DP size)"


def make_plots(cells: list[CellResult], trend_rows: list[dict], folder: Path) -> dict[str, Path]:
    """The report's figures as PNG + SVG under ``folder``; title -> PNG path (the crash matrix first)."""
    recs = _records(cells)
    marked, marks = _marked_records(cells)
    figures = {
        MATRIX_TITLE: ("crash_matrix", lambda p: plots.crash_matrix(marked, p, as_expected=marks)),
        "Per-phase latency, EAGLE3": ("latency_eagle", lambda p: plots.phase_latency(recs, p, mode="eagle")),
        "Per-phase latency, greedy": ("latency_greedy", lambda p: plots.phase_latency(recs, p, mode="greedy")),
        "Accept length": ("accept_length", lambda p: plots.accept_length_hist(recs, p)),
        "Acceptance rate per draft position": (
            "acceptance_per_position",
            lambda p: plots.acceptance_per_position(recs, p),
        ),
        "History trend": ("history_trend", lambda p: plots.history_trend(trend_rows, p)),
    }
    out = {}
    for title, (name, draw) in figures.items():
        draw(folder / name)
        out[title] = folder / f"{name}.png"
    return out


def cell_summary(c: CellResult) -> dict:
    """The compact per-cell entry of summary.json."""
    primary = c.primary()
    m = (primary or {}).get("metrics") or {}
    return {
        "cell": c.name,
        "notebook": c.notebook,
        "parameters": {k: v for k, v in c.parameters.items() if k not in ("record_path",)},
        "expect": c.expect,
        "execution": c.execution.status,
        "wall_s": round(c.execution.wall_s, 2),
        "primary": describe(primary) if primary else None,
        "runs": {r: describe(rec) for r, rec in c.runs().items()},
        "accept_length_mean": m.get("accept_length_mean"),
        "tokens_per_s": m.get("tokens_per_s"),
        "outputs_sha256": (primary or {}).get("outputs_sha256"),
        "verdict": c.verdict,
        "reasons": c.reasons,
        "paths": c.paths,
    }


def _params_text(params: dict) -> str:
    keep = {k: v for k, v in params.items() if k not in ("record_path", "model_dir")}
    return ", ".join(f"{k}={v}" for k, v in keep.items())


LINKS = (("html", "notebook"), ("notebook", ".ipynb"), ("record", "record"), ("log", "log"), ("rank_logs", "rank logs"))


def _row(c: CellResult, out: Path) -> str:
    s = cell_summary(c)
    links = " ".join(
        f"<a href='{html.escape(s['paths'][k])}'>{label}</a>"
        for k, label in LINKS
        if k in s["paths"] and (out / s["paths"][k]).exists()
    )
    note = shipped_note(c.notebook_record)
    shipped = f"<div class='shipped'>{html.escape(note)}</div>" if note else ""
    expect = "<br>".join(f"{html.escape(r)}: {html.escape(describe_expect(w))}" for r, w in s["expect"].items())
    got = "<br>".join(f"{html.escape(r)}: {html.escape(d)}" for r, d in s["runs"].items()) or html.escape(
        s["execution"]
    )
    why = "".join(f"<div class='why'>{html.escape(r)}</div>" for r in s["reasons"])
    al = "" if s["accept_length_mean"] is None else f"{s['accept_length_mean']:.3f}"
    primary = c.primary() or {}
    ok = primary.get("status") == "ok"  # a crashed run's tokens/s (0) and accept length measure nothing
    tps = "" if s["tokens_per_s"] is None or not ok else f"{s['tokens_per_s']:.1f}"
    al = al if ok else ""
    kernel = f"<br>{html.escape(record_label(primary, sep=' '))}" if primary.get("config", {}).get("backend") else ""
    return (
        f"<tr class='{s['verdict']}'><td><b>{html.escape(s['cell'])}</b>{kernel}"
        f"<br><code>{html.escape(_params_text(s['parameters']))}"
        f"</code>{shipped}</td><td>{expect}</td><td>{got}{why}</td><td>{al}</td><td>{tps}</td><td>{s['wall_s']:.1f}</td>"
        f"<td>{s['verdict']}</td><td>{links}</td></tr>"
    )


def _parity_table(cells: list[CellResult]) -> str:
    rows = parity_groups(cells)
    if not rows:
        return "<p>No ok runs.</p>"
    cols = ("settings", "outputs_sha256", "runs", "backends", "revisions", "dp")
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = "".join(
        f"<tr class='{'expected' if r['agree'] else 'unexpected'}'>"
        + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols)
        + "</tr>"
        for r in rows
    )
    return (
        "<p>Ok runs grouped by mode, spec settings, prompts and length: one outputs_sha256 per group means "
        f"token-identical outputs across backends, revisions and dp sizes.</p><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _figure(title: str, png: Path, out: Path) -> str:
    return (
        f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' src='data:image/png;base64,"
        f"{base64.b64encode(png.read_bytes()).decode()}'><div><a href='"
        f"{html.escape(str(png.with_suffix('.svg').relative_to(out)))}'>SVG</a></div>"
    )


def _banner(summary: dict) -> str:
    bad = summary["unexpected"]
    if not bad:
        return (
            f"<div class='banner expected'><b>PASS</b>: all {summary['cells_total']} cells ended as expected "
            "(expected crashes count as a pass).</div>"
        )
    return (
        f"<div class='banner unexpected'><b>FAIL</b>: {len(bad)} of {summary['cells_total']} cells ended "
        "unexpectedly:<ul>"
        + "".join(f"<li><b>{html.escape(b['cell'])}</b>: {html.escape('; '.join(b['reasons']))}</li>" for b in bad)
        + "</ul></div>"
    )


def write_report(out: Path, summary: dict, cells: list[CellResult], trend_rows: list[dict]) -> Path:
    """Write summary.json, plots/, report.html, junit.xml and summary.md into ``out``; returns the report path."""
    figures = make_plots(cells, trend_rows, out / "plots")
    summary = {
        **summary,
        "cells": [cell_summary(c) for c in cells],
        "plots": {t: str(p.relative_to(out)) for t, p in figures.items()},
        "comparisons": headlines([to_dict(c) for c in cells]),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    write_junit(out, summary, cells)
    write_markdown(out, summary, cells)
    env = summary.get("environment", {})
    meta = (
        f"<p>Night <b>{html.escape(str(summary['night']))}</b> "
        f"· matrix <code>{html.escape(str(summary['matrix']))}</code> · "
        f"{summary['wall_s']:.0f} s · shards {html.escape(', '.join(summary.get('shards', [])) or 'none')} · "
        f"{html.escape(summary.get('history_note', ''))} · "
        f"{html.escape(', '.join(f'{k} {v}' for k, v in env.items()))}</p>"
        "<p>flashinfer and fa3 compute with torch stand-ins of their kernels (on every machine), and Triton runs "
        "in its interpreter on CPU; every label says so. Latency compares code paths on this machine. "
        "Also here: <a href='summary.md'>summary.md</a>, <a href='junit.xml'>junit.xml</a>, "
        "<a href='summary.json'>summary.json</a>.</p>"
    )
    found = "".join(f"<li>{html.escape(h)}</li>" for h in summary["comparisons"])
    found = f"<h2>EAGLE3 against greedy</h2><ul>{found}</ul>" if found else ""
    matrix = _figure(MATRIX_TITLE, figures[MATRIX_TITLE], out)
    imgs = "".join(_figure(t, p, out) for t, p in figures.items() if t != MATRIX_TITLE)
    head = "".join(
        f"<th>{h}</th>"
        for h in ("cell (parameters)", "expected", "got", "accept length", "tokens/s", "wall s", "verdict", "artifacts")
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(_row(c, out) for c in cells)}</tbody></table>"
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Workbench nightly "
        f"{html.escape(str(summary['night']))}"
        f"</title><style>{CSS}</style></head><body><h1>EAGLE3 + DP attention nightly</h1>{_banner(summary)}"
        f"{found}{matrix}"
        f"{meta}{lane_section(summary['lane'])}<h2>Results</h2>{table}"
        f"<h2>Output parity</h2>{_parity_table(cells)}<h2>Plots</h2>{imgs}"
        f"{comparison_section([to_dict(c) for c in cells], out / 'plots' / 'comparison')}</body></html>"
    )
    path = out / "report.html"
    path.write_text(page)
    return path
