"""The upstream guard's lane in the nightly report: its latest result, or one line saying there is none.

The lane (``workbench upstream nightly --out DIR --history FILE``) writes ``DIR/upstream_lane.json``
(the night, every finding), ``DIR/upstream_lane.html`` (its own page) and appends a line to the
JSON-lines history ``FILE``. The report takes the newer of the two: the night in ``--lane DIR``
(default ``OUT/lane``) and the last line of ``--lane-history FILE``. A result that finished more
than ``CURRENT_H`` hours before the report is labelled as an earlier night's, with its date; only a
current result that did not pass fails this night. Reads JSON only (the merge job installs no
workbench dependencies).
"""

from __future__ import annotations

import html
import json
import shutil
from datetime import datetime
from pathlib import Path

LANE_JSON, LANE_HTML = "upstream_lane.json", "upstream_lane.html"  # as workbench.upstream.lane writes them
CURRENT_H = 12.0  # the nightly runs every 24 h: a lane result older than this is an earlier night's


def _when(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None


def _from_night(night: dict) -> dict:
    """A lane night (``upstream_lane.json``) in the history's shape, plus its findings' keys."""
    counts: dict[str, int] = {}
    for f in night.get("findings", []):
        counts[f.get("verdict") or "none"] = counts.get(f.get("verdict") or "none", 0) + 1
    live: dict[str, int] = {}  # the reads that raised on the release, per triage status
    for r in night.get("live", []):
        live[r.get("status") or "none"] = live.get(r.get("status") or "none", 0) + 1
    return {
        "finished_at": night.get("finished_at") or night.get("started_at"),
        "release": night.get("release"),
        "verdict": night.get("verdict"),
        "workbench_commit": night.get("workbench_commit"),
        "verdicts": counts,
        "failing": [f"{f['key']}: {f['gate']}" for f in night.get("failing", [])],
        "not_filed": [r["key"] for r in night.get("not_filed", [])],
        "live": live,
        "problems": night.get("problems", []),
    }


def latest_lane(out: Path, lane_dir: Path | None, history: Path | None, now: datetime) -> dict:
    """The lane's latest result for the report written into ``out`` at ``now`` (timezone-aware).

    {"state": "current" | "earlier" | "none", "source", "night" (history shape), "page" (the lane's
    HTML, relative to ``out``, copied to ``out/lane/`` when it lies elsewhere), "age_h", "why"}."""
    lane_dir = Path(lane_dir) if lane_dir is not None else out / "lane"
    found: list[tuple[dict, str]] = []
    if (lane_dir / LANE_JSON).is_file():
        found.append((_from_night(json.loads((lane_dir / LANE_JSON).read_text())), str(lane_dir / LANE_JSON)))
    if history is not None and Path(history).is_file():
        lines = [json.loads(x) for x in Path(history).read_text().splitlines() if x.strip()]
        if lines:
            found.append((lines[-1], f"{history} (last of {len(lines)} night(s))"))
    if not found:
        where = [str(lane_dir / LANE_JSON)] + ([str(history)] if history is not None else [])
        return {"state": "none", "why": f"no lane result: neither {' nor '.join(where)} exists or holds a night"}
    night, source = max(found, key=lambda x: _when(x[0].get("finished_at")) or datetime.min.replace(tzinfo=now.tzinfo))
    done = _when(night.get("finished_at"))
    age_h = (now - done).total_seconds() / 3600 if done else None
    page = None
    if source.startswith(str(lane_dir / LANE_JSON)) and (lane_dir / LANE_HTML).is_file():
        target = out / "lane" / LANE_HTML
        if (lane_dir / LANE_HTML).resolve() != target.resolve():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(lane_dir / LANE_HTML, target)
        page = f"lane/{LANE_HTML}"
    state = "current" if age_h is not None and age_h <= CURRENT_H else "earlier"
    return {"state": state, "source": source, "night": night, "page": page, "age_h": age_h}


def lane_problems(lane: dict) -> list[str]:
    """A current lane result that did not pass is a problem of this night too."""
    night = lane.get("night") or {}
    if lane["state"] != "current" or night.get("verdict") == "pass":
        return []
    reasons = night.get("problems") or night.get("failing") or ["no reason recorded"]
    return [f"upstream lane on sglang {night.get('release')}: {night.get('verdict')}: {'; '.join(reasons)}"]


def lane_line(lane: dict) -> str:
    """One line of plain text: the release, verdict, counts, date and commit (or why there is none)."""
    if lane["state"] == "none":
        return f"Upstream guard lane: {lane['why']}."
    n = lane["night"]
    counts = ", ".join(f"{v} {k}" for k, v in sorted(n.get("verdicts", {}).items())) or "no findings"
    when = f"finished {n.get('finished_at')}, workbench {str(n.get('workbench_commit'))[:12]}"
    if lane["state"] == "earlier":
        age = f"{lane['age_h']:.0f} h" if lane.get("age_h") is not None else "an unknown time"
        when = f"an EARLIER night's result ({age} before this report): {when}"
    return (
        f"Upstream guard lane: sglang {n.get('release')} {str(n.get('verdict')).upper()} ({counts}; "
        f"{len(n.get('failing', []))} failing the gate, {len(n.get('not_filed', []))} live, not filed upstream); "
        f"{when}"
    )


def lane_section(lane: dict) -> str:
    """The report's section: the line above, then the failing (new) and live findings, problems and the page."""
    esc = html.escape
    if lane["state"] == "none":
        return f"<section><h2>Upstream guard lane</h2><p>{esc(lane_line(lane))}</p></section>"
    n = lane["night"]
    items = [
        ("Could not run (a failure, never a pass)", n.get("problems", [])),
        ("Failing the gate (--fail-on new)", n.get("failing", [])),
        ("Live, not filed upstream (reproducer and fix shipped in the repository)", n.get("not_filed", [])),
    ]
    lists = "".join(
        f"<p><b>{esc(title)}</b>:</p><ul>{''.join(f'<li><code>{esc(str(x))}</code></li>' for x in xs)}</ul>"
        for title, xs in items
        if xs
    )
    page = (
        f"<p>The lane's own page (every finding with its verdict, the last nights): "
        f"<a href='{esc(lane['page'])}'>{esc(lane['page'])}</a>.</p>"
        if lane.get("page")
        else f"<p>The lane's own page is not here (this result is from {esc(lane['source'])}).</p>"
    )
    banner = "expected" if n.get("verdict") == "pass" and lane["state"] == "current" else "unexpected"
    return (
        f"<section><h2>Upstream guard lane</h2><div class='banner {banner}'>{esc(lane_line(lane))}</div>"
        f"{lists}{page}<p>From {esc(lane['source'])}.</p></section>"
    )
