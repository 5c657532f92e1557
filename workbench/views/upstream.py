"""What notebook 04 shows: the survey, the replays, the fidelity check and the contract fuzzer,
either from the shipped measurements (offline) or measured now (``live``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from workbench.notebook import Table

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def load_measurements(
    releases: list[str],
    replay_releases: list[str],
    live: bool = False,
    cache_dir: str | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """{"survey": full survey result, "replays": [run records], "source": ...}.

    Offline: the survey and replays shipped in workbench/assets (measured with the commands in
    upstream_snapshot.json's provenance). Live: download, build and run them now."""
    if not live:
        survey = json.loads((ASSETS / "upstream_survey.json").read_text())
        replays = [
            r
            for r in json.loads((ASSETS / "upstream_replays.json").read_text())
            if r["config"]["sglang"] in replay_releases
        ]
        kept = [v for v in survey["versions"] if v in releases] or survey["versions"]
        survey = {**survey, "versions": kept, "releases": {v: survey["releases"][v] for v in kept}}
        prov = json.loads((ASSETS / "upstream_snapshot.json").read_text())["provenance"]
        return {"survey": survey, "replays": replays, "source": f"shipped measurements ({prov['generated_at']})"}
    from workbench.upstream import default_cache_dir, replay, survey

    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    result = survey(releases, cache, log=log)
    recs = [replay(v, cache, log=log) for v in replay_releases]
    return {"survey": result, "replays": recs, "source": f"measured now (cache {cache})"}


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


def replay_failures(replays: list[dict], expected: dict) -> list[str]:
    """Releases whose replay status differs from ``expected`` {release: status}."""
    got = {r["config"]["sglang"]: r["status"] for r in replays}
    return [f"sglang {v}: expected {want}, got {got.get(v)}" for v, want in expected.items() if got.get(v) != want]


def problems(data: dict, fid: dict, cells: list[dict], replay_releases: list[str]) -> list[str]:
    """What departs from upstream: replays not ending as released (0.5.12 / 0.5.13 crashed, later
    ok), fidelity differences, fuzzer cells that differ from what the declared contracts predict
    (a failure outside the pr-24860 hole, or a hole cell that passes)."""
    from workbench.experiments.contracts import unexpected

    expected = {
        v: ("crashed" if v in ("0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1") else "ok") for v in replay_releases
    }
    out = replay_failures(data["replays"], expected)
    out += [f"fidelity: {d['check']}" for d in fid["differences"]]
    out += [
        f"fuzzer: {c['revision']} {c['backend']} {c['spec_input']} {c['mode']}: {c['outcome']}, "
        f"contracts predict {c['expected']}"
        for c in unexpected(cells)
    ]
    return out


def save_record(path: str, params: dict, data: dict, fid: dict, cells: list[dict], found: list[str]) -> Path:
    """The notebook record (``workbench.notebook`` bundle): one run record per replayed release
    (role ``replay/<version>``) and a ``checks`` record whose status is ok when nothing departs
    from upstream (else ``mismatch``, with the problems)."""
    from workbench.notebook import save_bundle

    checks = {
        "status": "ok" if not found else "mismatch",
        "crash": None,
        "problems": found,
        "config": {"backend": "workbench contracts", "kernel": None, "source": data["source"]},
        "fidelity": fid,
        "fuzzer_failing": [c for c in cells if c["outcome"] != "pass"],
    }
    runs = {f"replay/{r['config']['sglang']}": r for r in data["replays"]}
    runs["checks"] = checks
    return save_bundle(path, "04_upstream_replay", params, runs, primary="checks")


def load_findings(
    releases: list[str], live: bool = False, cache_dir: str | None = None, log: Callable[[str], None] = print
) -> dict:
    """Lint findings of every release, each triaged by a replay: shipped (dated) or measured now."""
    if not live:
        data = json.loads((ASSETS / "upstream_findings.json").read_text())
        data["source"] = f"shipped measurement ({data['generated_at']}, {data['measured_on']})"
        return data
    from workbench.upstream.guard import check

    data = check(releases, replay=True, cache_dir=Path(cache_dir) if cache_dir else None, log=log)
    data["source"] = "measured now"
    return data


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
