"""What notebook 04 and the upstream lane show: the survey, the replays, the fidelity check, the
contract fuzzer, the guard's verdicts and its reproducers as tables (the data:
``workbench.upstream.guard_measurements``), and one night of the upstream lane, with its history, as an
HTML section."""

from __future__ import annotations

import html
from pathlib import Path

from workbench.upstream.gate import live_lines, not_filed_lines
from workbench.upstream.replay.repro_end import describe
from workbench.upstream.static.finding import AnyFinding
from workbench.views.tables import Table


def survey_table(survey: dict) -> Table:
    """One row per fact, one column per release (the survey's own table)."""
    rows = [
        {"fact": f, **{v: survey["releases"][v]["facts"][f]["text"] for v in survey["versions"]}}
        for f in survey["fact_names"]
    ]
    return Table(rows, ["fact", *survey["versions"]])


def replay_table(replays: list[dict]) -> Table:
    rows = []
    for r in replays:
        crash = r.get("crash") or {}
        at = crash.get("raised_at") or {}
        rows.append(
            {
                "sglang": r["config"]["sglang"],
                "status": r["status"],
                "exception": f"{crash.get('exception_type')}: {crash.get('message')}" if crash else "",
                "raised at": f"{at.get('file', '')}:{at.get('line', '')}" if at else "",
                "kv_indptr": (r.get("metrics") or {}).get("kv_indptr"),
                "run s": (r.get("timings") or {}).get("run_s"),
                "notes": "; ".join(r.get("notes", []))[:80],
            }
        )
    return Table(rows)


def fidelity_table(result: dict) -> Table:
    mark = {True: "same", False: "DIFFERENT", None: "n/a"}
    return Table(
        [
            {"check": c["check"], "ours": c["ours"], "upstream": c["upstream"], "": mark[c["equal"]]}
            for c in result["checks"]
        ]
    )


def fuzzer_table(rows: list[dict]) -> Table:
    """Pass counts per revision x backend, and the failing cells spelled out."""
    out = {}
    for r in rows:
        key = (r["revision"], r["backend"])
        cell = out.setdefault(key, {"revision": r["revision"], "backend": r["backend"], "cells": 0, "failing": []})
        cell["cells"] += 1
        if r["status"] != "ok":
            cell["failing"].append(f"{r['spec_input']} x {r['mode']}: {r['exception']}")
    return Table([{**c, "failing": "; ".join(c["failing"]) or "-"} for c in out.values()])


def findings_table(findings: list[AnyFinding]) -> Table:
    """One row per (finding, releases it appears in): backend, mode, class, attribute, verdict."""
    merged: dict = {}
    for f in findings:
        key = (f.backend, f.mode, f.spec_class, f.attr, f.verdict)
        row = merged.setdefault(
            key,
            {
                "backend": f.backend,
                "mode": f.mode,
                "class": f.spec_class,
                "attribute": f.attr,
                "releases": [],
                "read": f"{f.read_file.split('/')[-1]}:{f.read_line}",
                "verdict": f.verdict,
                "why": f.verdict_reason,
            },
        )
        row["releases"].append(f.source.replace("sglang ", ""))
    rows = [{**r, "releases": ", ".join(dict.fromkeys(r["releases"]))} for r in merged.values()]
    return Table(rows, ["backend", "mode", "class", "attribute", "releases", "read", "verdict", "why"])


VERDICTS = (
    "confirmed end to end",
    "confirmed",
    "traced: raised",
    "refuted",
    "traced: not read",
    "unreachable",
    "unverified",
)


def verdict_counts(findings: list[AnyFinding]) -> Table:
    """One row per source: how many findings got each verdict, and the unverified share."""
    rows: dict[str, dict] = {}
    for f in findings:
        row = rows.setdefault(f.source, {"source": f.source, **dict.fromkeys(VERDICTS, 0), "findings": 0})
        row[f.verdict] = row.get(f.verdict, 0) + 1
        row["findings"] += 1
    for row in rows.values():
        row["unverified %"] = round(100 * row["unverified"] / row["findings"], 1) if row["findings"] else 0.0
    return Table(list(rows.values()), ["source", "findings", *VERDICTS, "unverified %"])


def _reach(r: dict) -> str:
    reach = r.get("reachability") or {}
    return "; ".join(f"{k}: {v}" for k, v in reach.items()) or "not analysed"


def reproducer_table(data: dict) -> Table:
    """One row per confirmed live finding: raised on the release, fixed by the smallest fix, the range."""
    rows = []
    for key, r in data["results"].items():
        raises = r.get("raises", [])
        rows.append(
            {
                "finding": key,
                "read": f"{r['finding']['read_file'].rsplit('/', 1)[-1]}:{r['finding']['read_line']}",
                "on the release": f"{describe(r['on_release'])} at {r['on_release'].get('at')}",
                "with the fix": describe(r["with_fix"]),
                "raises on": f"{raises[0]} - {raises[-1]} ({len(raises)} of {len(r['releases'])})" if raises else "-",
                "reachability": _reach(r),
            }
        )
    return Table(rows, ["finding", "read", "on the release", "with the fix", "raises on", "reachability"])


def reproducer_files(data: dict, key: str) -> str:
    """The fix diff and the reproducer's command of one finding, as text."""
    folder = Path(data["folder"]) / data["reproducers"][key]["folder"]
    return (
        f"{folder}/repro.py  (standalone: imports only sglang and torch)\n"
        f"  PYTHONPATH=<sglang {data['release']} sources> TRITON_INTERPRET=1 python repro.py\n\n"
        f"{folder}/fix.diff:\n{(folder / 'fix.diff').read_text()}"
    )


def lane_html(night: dict, nights: list[dict] | None = None) -> str:
    """One night of the upstream lane (``workbench.upstream.lane.run_lane``) as an HTML section for the
    nightly report: its verdict, what could not run, what fails the gate, the live findings not filed
    upstream, every read that raised with its triage status, every finding with its verdict, and the
    last 14 nights of ``nights`` (the history)."""
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(f['backend'])}</td><td>{esc(f['mode'])}</td><td>{esc(f['spec_class'])}</td>"
        f"<td><code>{esc(f['attr'])}</code></td><td><code>{esc(f['read_file'].split('/')[-1])}:{f['read_line']}"
        f"</code></td><td>{esc(str(f.get('verdict')))}</td><td>{esc(str(f.get('verdict_reason')))}</td></tr>"
        for f in night["findings"]
    )
    fails = "".join(f"<li><code>{esc(f['key'])}</code>: {esc(f['gate'])}</li>" for f in night["failing"])
    probs = "".join(f"<li>{esc(p)}</li>" for p in night["problems"])
    unfiled = "".join(f"<li>{esc(line)}</li>" for line in not_filed_lines(night.get("not_filed", [])))
    live = "".join(f"<li>{esc(line)}</li>" for line in live_lines(night.get("live", [])))
    hist = "".join(
        f"<tr><td>{esc(n['finished_at'])}</td><td>{esc(str(n['release']))}</td><td>{esc(n['verdict'])}</td>"
        f"<td>{esc(', '.join(f'{k} {v}' for k, v in n['verdicts'].items()))}</td>"
        f"<td>{len(n['failing'])}</td><td><code>{esc(str(n.get('workbench_commit')))[:12]}</code></td></tr>"
        for n in reversed((nights or [])[-14:])
    )
    return (
        f"<section><h2>Upstream lane: sglang {esc(str(night['release']))} ({esc(night['verdict'])})</h2>"
        f"<p>Run {esc(night['started_at'])} at workbench {esc(str(night['workbench_commit']))}: the contract "
        "lint of the newest release's sources, every finding given a verdict by replays on the real backends "
        "(CPU, Triton interpreter), judged with <code>--fail-on new</code> against the triage file.</p>"
        + (f"<p><b>The lane could not run</b> (a failure, never a pass):</p><ul>{probs}</ul>" if probs else "")
        + (f"<p><b>Failing the gate:</b></p><ul>{fails}</ul>" if fails else "")
        + (
            "<p><b>Live, not filed upstream</b> (confirmed on this release; passing on the reproducer and smallest "
            f"fix shipped in the repository, no upstream issue recorded):</p><ul>{unfiled}</ul>"
            if unfiled
            else ""
        )
        + (
            "<p><b>Live</b> (every read that raised on this release, confirmed or traced, with its triage status):"
            f"</p><ul>{live}</ul>"
            if live
            else ""
        )
        + "<table><tr><th>backend</th><th>mode</th><th>class</th><th>attribute</th><th>read</th>"
        f"<th>verdict</th><th>why</th></tr>{rows}</table>"
        "<h3>History</h3><table><tr><th>night</th><th>release</th><th>lane</th><th>verdicts</th>"
        f"<th>failing</th><th>workbench</th></tr>{hist}</table></section>"
    )
