"""The nightly network lane on the newest sglang release: lint + replays, gated by a triage file.

Each night: resolve the newest release from PyPI, lint it and replay its spec inputs, triage every
finding, and fail on any finding whose key (`backend|backend class|mode|class|attribute`) the
triage file (`workbench/assets/upstream_triage.json`) does not list, or that a replay now
confirms while the file says otherwise. Every night's findings are appended to a JSON-lines
history; `render_html` / `format_text` show a night in the report.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path

from .context import UpstreamContext
from .guard import check
from .sources.releases import latest_release
from .static.lint import finding_key

TRIAGE_FILE = Path(__file__).resolve().parent.parent / "assets" / "upstream_triage.json"


def load_triage(path: Path | None = None) -> dict[str, dict]:
    """{finding key: {"status", "reason", ...}} from the triage file (plain JSON)."""
    return json.loads(Path(path or TRIAGE_FILE).read_text())["findings"]


def gate(findings: list[dict], triaged: dict[str, dict]) -> list[dict]:
    """Findings that fail the night: untriaged keys, or confirmed now but triaged otherwise."""
    bad = []
    for f in findings:
        known = triaged.get(finding_key(f))
        live = f.get("verdict")
        if known is None:
            bad.append({**f, "gate": "not in the triage file"})
        elif live == "confirmed" and known["status"] != "confirmed":
            bad.append({**f, "gate": f"a replay now confirms it; the triage file says {known['status']}"})
    return bad


def run_lane(
    ctx: UpstreamContext,
    out: Path,
    history: Path | None = None,
    triage_path: Path | None = None,
    version: str | None = None,
) -> dict:
    """One night of the lane; writes `out/upstream_lane.json` and appends to `history`."""
    log = ctx.log
    newest = version or latest_release(ctx, refresh=True)
    log(f"[upstream lane] newest sglang release: {newest}")
    result = check(ctx, [newest], replay=True)
    triaged = load_triage(triage_path)
    failing = gate(result["findings"], triaged)
    night = {
        "finished_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "release": newest,
        "verdict": "fail" if failing else "pass",
        "findings": [{**f, "triage_file": triaged.get(finding_key(f))} for f in result["findings"]],
        "failing": failing,
        "replay": result["results"][0]["replay"],
        "lint": result["results"][0]["lint"],
    }
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "upstream_lane.json").write_text(json.dumps(night, indent=1))
    (out / "upstream_lane.html").write_text(render_html(night))
    if history is not None:
        history.parent.mkdir(parents=True, exist_ok=True)
        with open(history, "a") as fh:
            fh.write(
                json.dumps(
                    {k: night[k] for k in ("finished_at", "release", "verdict")}
                    | {"findings": [finding_key(f) + "|" + f["verdict"] for f in result["findings"]]}
                )
                + "\n"
            )
    log(format_text(night))
    return night


def format_text(night: dict) -> str:
    """The night as plain text: verdict, then one line per finding."""
    lines = [
        f"upstream lane, sglang {night['release']}: {night['verdict'].upper()} "
        f"({len(night['findings'])} findings, {len(night['failing'])} failing the gate)"
    ]
    for f in night["findings"]:
        lines.append(
            f"  {f['backend']:<15} {f['mode']:<14} {f['spec_class']:<24} {f['attr']:<26} "
            f"{f['read_file'].split('/')[-1]}:{f['read_line']:<10} {f['verdict']}"
        )
    for f in night["failing"]:
        lines.append(f"  FAIL {finding_key(f)} at {f['read_file']}:{f['read_line']}: {f['gate']}")
    return "\n".join(lines)


def render_html(night: dict) -> str:
    """An HTML section for the nightly report."""
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(f['backend'])}</td><td>{esc(f['mode'])}</td><td>{esc(f['spec_class'])}</td>"
        f"<td><code>{esc(f['attr'])}</code></td><td><code>{esc(f['read_file'].split('/')[-1])}:{f['read_line']}</code></td>"
        f"<td>{esc(f['verdict'])}</td><td>{esc(f['verdict_reason'])}</td></tr>"
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


def build_triage(result: dict, how: str) -> dict:
    """A triage file from a `check()` result: per finding key, the newest release's triage."""
    out: dict[str, dict] = {}
    for f in result["findings"]:
        key = finding_key(f)
        entry = out.setdefault(key, {"releases": []})
        entry["releases"].append(f["source"].replace("sglang ", ""))
        entry.update(
            status=f["verdict"],
            reason=f["verdict_reason"],
            read=f"{f['read_file']}:{f['read_line']}",
            install=f"{f['install_file']}:{f['install_line']}",
        )
    return {"how": how, "generated_at": result["generated_at"], "findings": out}
