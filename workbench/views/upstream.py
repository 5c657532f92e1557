"""What notebook 04 and the upstream lane show: the survey, the replays, the fidelity check, the
contract fuzzer and the lint findings as tables (the data: ``workbench.upstream.measurements``), and
one night of the upstream lane as an HTML section."""

from __future__ import annotations

import html

from workbench.upstream.lint import finding_key
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
        if r["outcome"] != "pass":
            cell["failing"].append(f"{r['spec_input']} x {r['mode']}: {r['outcome']}")
    return Table([{**c, "failing": "; ".join(c["failing"]) or "-"} for c in out.values()])


def findings_table(findings: list[dict]) -> Table:
    """One row per (finding, releases it appears in): backend, mode, class, attribute, triage."""
    merged: dict = {}
    for f in findings:
        key = (f["backend"], f["forward_mode"], f["class"], f["attribute"], f["triage"]["status"])
        row = merged.setdefault(
            key,
            {
                "backend": f["backend"],
                "mode": f["forward_mode"],
                "class": f["class"],
                "attribute": f["attribute"],
                "releases": [],
                "read": f["read"].split("/")[-1],
                "triage": f["triage"]["status"],
                "why": f["triage"]["reason"],
            },
        )
        row["releases"].append(f["source"].replace("sglang ", ""))
    rows = [{**r, "releases": ", ".join(dict.fromkeys(r["releases"]))} for r in merged.values()]
    return Table(rows, ["backend", "mode", "class", "attribute", "releases", "read", "triage", "why"])


def lane_html(night: dict) -> str:
    """One night of the upstream lane (``workbench.upstream.lane.run_lane``) as an HTML section."""
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(f['backend'])}</td><td>{esc(f['forward_mode'])}</td><td>{esc(f['class'])}</td>"
        f"<td><code>{esc(f['attribute'])}</code></td><td><code>{esc(f['read'].split('/')[-1])}</code></td>"
        f"<td>{esc(f['triage']['status'])}</td><td>{esc(f['triage']['reason'])}</td></tr>"
        for f in night["findings"]
    )
    fails = "".join(f"<li><code>{esc(finding_key(f))}</code>: {esc(f['gate'])}</li>" for f in night["failing"])
    return (
        f"<section><h2>Upstream lane: sglang {esc(night['release'])} "
        f"({esc(night['verdict'])})</h2><p>Run {esc(night['finished_at'])}: contract lint of the "
        "release's sources and replays of its spec inputs on the real backends (CPU, Triton "
        "interpreter). <em>confirmed</em>: the real backend raises on the input the worker installs "
        "(the backend contract; the runner path to the call is not replayed).</p>"
        + (f"<ul>{fails}</ul>" if fails else "")
        + "<table><tr><th>backend</th><th>mode</th><th>class</th><th>attribute</th><th>read</th>"
        f"<th>triage</th><th>why</th></tr>{rows}</table></section>"
    )
