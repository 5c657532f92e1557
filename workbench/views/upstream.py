"""What notebook 04 shows: the survey, the replays, the fidelity check, the contract fuzzer, the
guard's verdicts and its reproducers for confirmed live findings, either from the shipped
measurements (offline, labelled with their date and the commit that made them) or measured now
(``live``)."""

from __future__ import annotations

import json
import tempfile
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
    from workbench.upstream.context import UpstreamContext
    from workbench.upstream.replay.records import seed_record
    from workbench.upstream.static.survey import survey

    ctx = UpstreamContext(log=log) if cache_dir is None else UpstreamContext(cache_dir=Path(cache_dir), log=log)
    result = survey(ctx, releases)
    recs = [seed_record(ctx, v) for v in replay_releases]
    return {"survey": result, "replays": recs, "source": f"measured now (cache {ctx.cache_dir})"}


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
    from workbench.upstream.context import UpstreamContext
    from workbench.upstream.guard import check

    ctx = UpstreamContext(log=log) if cache_dir is None else UpstreamContext(cache_dir=Path(cache_dir), log=log)
    data = check(ctx, releases, replay=True)
    data["source"] = "measured now"
    return data


def findings_table(findings: list[dict]) -> Table:
    """One row per (finding, releases it appears in): backend, mode, class, attribute, verdict."""
    merged: dict = {}
    for f in findings:
        key = (f["backend"], f["mode"], f["spec_class"], f["attr"], f["verdict"])
        row = merged.setdefault(
            key,
            {
                "backend": f["backend"],
                "mode": f["mode"],
                "class": f["spec_class"],
                "attribute": f["attr"],
                "releases": [],
                "read": f"{f['read_file'].split('/')[-1]}:{f['read_line']}",
                "verdict": f["verdict"],
                "why": f["verdict_reason"],
            },
        )
        row["releases"].append(f["source"].replace("sglang ", ""))
    rows = [{**r, "releases": ", ".join(dict.fromkeys(r["releases"]))} for r in merged.values()]
    return Table(rows, ["backend", "mode", "class", "attribute", "releases", "read", "verdict", "why"])


VERDICTS = ("confirmed", "traced: raised", "refuted", "traced: not read", "unreachable", "unverified")


def verdict_counts(findings: list[dict]) -> Table:
    """One row per source: how many findings got each verdict, and the unverified share."""
    rows: dict[str, dict] = {}
    for f in findings:
        row = rows.setdefault(f["source"], {"source": f["source"], **dict.fromkeys(VERDICTS, 0), "findings": 0})
        row[f["verdict"]] = row.get(f["verdict"], 0) + 1
        row["findings"] += 1
    for row in rows.values():
        row["unverified %"] = round(100 * row["unverified"] / row["findings"], 1) if row["findings"] else 0.0
    return Table(list(rows.values()), ["source", "findings", *VERDICTS, "unverified %"])


def load_reproducers(
    live: bool = False, version: str | None = None, cache_dir: str | None = None, log: Callable[[str], None] = print
) -> dict:
    """The reproducer index (``workbench upstream repro``) with each folder's result under ``results``
    and a ``label``: the shipped one, or one made now for `version` into a temporary folder."""
    if live:
        from workbench.upstream.context import UpstreamContext
        from workbench.upstream.replay.repro import reproducers
        from workbench.upstream.sources.releases import latest_release

        ctx = UpstreamContext(log=log) if cache_dir is None else UpstreamContext(cache_dir=Path(cache_dir), log=log)
        folder = Path(tempfile.mkdtemp(prefix="wb-repro-"))
        index = reproducers(ctx, version or latest_release(ctx), folder)
        label = f"made now in {folder} (sglang {index['release']})"
    else:
        folder = ASSETS / "upstream_repro"
        index = json.loads((folder / "index.json").read_text())
        label = (
            f"shipped measurement of {index['measured_at'][:10]} on sglang {index['release']} "
            f"by eagle-workbench {index['workbench_commit']}, not a live run"
        )
    results = {
        key: json.loads((folder / r["folder"] / "result.json").read_text()) for key, r in index["reproducers"].items()
    }
    return {**index, "folder": str(folder), "results": results, "label": label}


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
                "on the release": f"{r['on_release'].get('outcome')} at {r['on_release'].get('at')}",
                "with the fix": r["with_fix"].get("outcome"),
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
