"""The nightly network lane on the newest sglang release: lint + replays, judged by the gate.

Each night: ask PyPI for the newest release (it must answer), lint it, replay its spec inputs,
give every finding a verdict, run each confirmed finding on a path the real runtime drives end to
end (``runtime/e2e.py``: ``confirmed end to end`` when the release's own runtime raised at the read)
and judge the findings with `--fail-on new` against the triage file
(`gate.py`); confirmed findings that pass only on a shipped reproducer are listed as "live, not
filed upstream", and every read that raised on the release (confirmed or traced) is listed with its
triage status (`live`). The night is `pass`, `fail` (findings fail the gate) or `error` (PyPI, the
environment, a covered file, the lint or the replay could not be read or run, or any exception: never a
pass, and the night's JSON and history line are written all the same). Every night is appended to a
JSON-lines history; `format_text` shows a night as text (`workbench.views.guard_tables.lane_html` as
HTML, with the history's last nights).
"""

from __future__ import annotations

import datetime as _dt
import json
import traceback
from pathlib import Path

from workbench.run.provenance import workbench_commit
from workbench.run.serialise import to_dict

from . import guard
from .context import UpstreamContext
from .gate import (
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_PASS,
    GateError,
    by_status,
    judge,
    live_lines,
    live_rows,
    load_triage,
    not_filed,
    not_filed_lines,
    ran_problems,
    triage_keys,
)
from .sources.envs import EnvBuildError
from .sources.releases import ReleaseError, latest_release
from .sources.trees import SourceError

LANE_JSON, LANE_HTML = "upstream_lane.json", "upstream_lane.html"
EXIT = {"pass": EXIT_PASS, "fail": EXIT_FAIL, "error": EXIT_ERROR}


def run_lane(
    ctx: UpstreamContext,
    out: Path,
    history: Path | None = None,
    triage_path: Path | None = None,
    version: str | None = None,
) -> dict:
    """One night of the lane; writes `out/upstream_lane.json`, appends to `history` (the HTML:
    ``workbench.views.guard_tables.lane_html``). Any exception is a problem of the night (verdict
    `error`, exit 2): the JSON and the history line are written all the same."""
    night: dict = {
        "started_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "workbench_commit": workbench_commit(),
        "release": version,
        "problems": [],
        "findings": [],
        "failing": [],
        "not_filed": [],
        "live": [],
    }
    try:
        if history is not None:
            read_history(history)  # an unreadable history is a problem of this night, not a crash after it
        triage = load_triage(triage_path)
        newest = version or latest_release(ctx, refresh=True, strict=True)
        night["release"] = newest
        ctx.log(f"[upstream lane] newest sglang release: {newest}")
        # end to end: each confirmed finding the real runtime drives is run on the release's own
        # runtime, and the gate judges its verdict; a run that cannot decide makes the night an error
        result = guard.check(ctx, [newest], replay=True, end_to_end=True)
        night["problems"] = ran_problems(result, replay=True)
        e2e = result["results"][0].get("end_to_end") or {}
        night["end_to_end"] = {k: e2e.get(k) for k in ("status", "message", "verdicts", "run_s")}
        night["findings"] = [
            {**to_dict(f), "triage_entries": {k: to_dict(e) if (e := triage.get(k)) else None for k in triage_keys(f)}}
            for f in result["findings"]
        ]
        night["failing"] = [x.as_json() for x in judge(result["findings"], triage, "new", newest)]
        night["not_filed"] = not_filed(result["findings"], triage, newest)
        night["live"] = live_rows(result["findings"], triage, newest)
        night["replay"] = {k: v for k, v in (result["results"][0].get("replay") or {}).items() if k != "cases"}
    except Exception as exc:  # noqa: BLE001 - every failure is the night's error, never a missing night
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
        known = isinstance(exc, (GateError, ReleaseError, EnvBuildError, SourceError))
        night["problems"].append(f"{type(exc).__name__}: {exc}" + ("" if known else at))
    _finish(night)
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / LANE_JSON).write_text(json.dumps(night, indent=1))
    except OSError as exc:
        night["problems"].append(f"could not write {out / LANE_JSON}: {exc}")
        _finish(night)
    if history is not None:
        try:
            append_history(history, night)
        except OSError as exc:
            night["problems"].append(f"could not append to the history {history}: {exc}")
            _finish(night)
            if (out / LANE_JSON).exists():
                (out / LANE_JSON).write_text(json.dumps(night, indent=1))
    ctx.log(format_text(night))
    return night


def _finish(night: dict) -> None:
    night["verdict"] = "error" if night["problems"] else ("fail" if night["failing"] else "pass")
    night["finished_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def history_line(night: dict) -> dict:
    """What the history keeps of a night."""
    counts: dict[str, int] = {}
    for f in night["findings"]:
        counts[f.get("verdict") or "none"] = counts.get(f.get("verdict") or "none", 0) + 1
    return {
        "finished_at": night["finished_at"],
        "release": night["release"],
        "verdict": night["verdict"],
        "workbench_commit": night["workbench_commit"],
        "verdicts": counts,
        "failing": [f"{f['key']}: {f['gate']}" for f in night["failing"]],
        "not_filed": [r["key"] for r in night.get("not_filed", [])],
        "live": by_status(night.get("live", [])),
        "problems": night["problems"],
    }


def append_history(path: Path, night: dict) -> None:
    """Append the night to the JSON-lines history at `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(history_line(night)) + "\n")


def read_history(path: Path) -> list[dict]:
    """The nights of a JSON-lines history (a missing file is an empty history; a line that is not a
    JSON object raises GateError naming the file and line)."""
    path = Path(path)
    if not path.exists():
        return []
    nights = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            night = json.loads(line)
        except ValueError as exc:
            raise GateError(f"history {path} line {i} is not JSON: {exc}") from None
        if not isinstance(night, dict):
            raise GateError(f"history {path} line {i} is not a JSON object")
        nights.append(night)
    return nights


def format_text(night: dict) -> str:
    """The night as plain text: verdict, problems, one line per finding, the failing ones."""
    lines = [
        f"upstream lane, sglang {night['release']}: {night['verdict'].upper()} "
        f"({len(night['findings'])} findings, {len(night['failing'])} failing the gate, "
        f"{len(night['problems'])} problem(s))"
    ]
    lines += [f"  ERROR {p}" for p in night["problems"]]
    for f in night["findings"]:
        lines.append(
            f"  {f['backend']:<15} {f['mode']:<14} {f['spec_class']:<24} {f['attr']:<26} "
            f"{f['read_file'].split('/')[-1]}:{f['read_line']:<6} {f.get('verdict')}"
        )
    lines += [f"  {line}" for line in live_lines(night.get("live", []))]
    lines += [f"  {line}" for line in not_filed_lines(night.get("not_filed", []))]
    lines += [f"  FAIL {f['key']} at {f['read_file']}:{f['read_line']}: {f['gate']}" for f in night["failing"]]
    return "\n".join(lines)
