"""The nightly network lane on the newest sglang release: lint + replays, gated by a triage file.

Each night: resolve the newest release from PyPI, lint it and replay its spec inputs, triage every
finding, and fail on any finding whose key (`backend|backend class|mode|class|attribute`) the
triage file (`workbench/assets/upstream_triage.json`) does not list, or that a replay now
confirms while the file says otherwise. Every night's findings are appended to a JSON-lines
history; `format_text` shows a night as text (`workbench.views.upstream.lane_html` as HTML).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

from .guard import check
from .lint import finding_key
from .releases import Log, default_cache_dir, echo, known_releases, latest_release

TRIAGE_FILE = Path(__file__).resolve().parent.parent / "assets" / "upstream_triage.json"


def load_triage(path: Path | None = None) -> dict[str, dict]:
    """{finding key: {"status", "reason", ...}} from the triage file (plain JSON)."""
    return json.loads(Path(path or TRIAGE_FILE).read_text())["findings"]


def gate(findings: list[dict], triaged: dict[str, dict]) -> list[dict]:
    """Findings that fail the night: untriaged keys, or confirmed now but triaged otherwise."""
    bad = []
    for f in findings:
        known = triaged.get(finding_key(f))
        live = f.get("triage", {}).get("status")
        if known is None:
            bad.append({**f, "gate": "not in the triage file"})
        elif live == "confirmed" and known["status"] != "confirmed":
            bad.append({**f, "gate": f"a replay now confirms it; the triage file says {known['status']}"})
    return bad


def run_lane(
    out: Path,
    history: Path | None = None,
    triage_path: Path | None = None,
    version: str | None = None,
    cache_dir: Path | None = None,
    log: Log = echo,
) -> dict:
    """One night of the lane; writes `out/upstream_lane.json` and appends to `history`."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    newest = version or latest_release(cache_dir)
    known_releases(cache_dir, refresh=version is None)
    log(f"[upstream lane] newest sglang release: {newest}")
    result = check([newest], replay=True, cache_dir=cache_dir, log=log)
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
    if history is not None:
        history.parent.mkdir(parents=True, exist_ok=True)
        with open(history, "a") as fh:
            fh.write(
                json.dumps(
                    {k: night[k] for k in ("finished_at", "release", "verdict")}
                    | {"findings": [finding_key(f) + "|" + f["triage"]["status"] for f in result["findings"]]}
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
            f"  {f['backend']:<15} {f['forward_mode']:<14} {f['class']:<24} {f['attribute']:<26} "
            f"{f['read'].split('/')[-1]:<34} {f['triage']['status']}"
        )
    for f in night["failing"]:
        lines.append(f"  FAIL {finding_key(f)} at {f['read']}: {f['gate']}")
    return "\n".join(lines)


def build_triage(result: dict, how: str) -> dict:
    """A triage file from a `check()` result: per finding key, the newest release's triage."""
    out: dict[str, dict] = {}
    for f in result["findings"]:
        key = finding_key(f)
        entry = out.setdefault(key, {"releases": []})
        entry["releases"].append(f["source"].replace("sglang ", ""))
        entry.update(status=f["triage"]["status"], reason=f["triage"]["reason"], read=f["read"], install=f["install"])
    return {"how": how, "generated_at": result["generated_at"], "findings": out}
