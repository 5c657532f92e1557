"""What notebook 04 reads about the real releases: the survey, the replays and the lint findings,
from the shipped measurements (offline, dated) or measured now (``live``); what departs from
upstream; the notebook record's runs. ``workbench.views.upstream`` shows them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from workbench.experiments.contracts import unexpected
from workbench.upstream.contract_survey import survey as survey_releases
from workbench.upstream.guard import check
from workbench.upstream.release_replay import replay
from workbench.upstream.releases import default_cache_dir

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
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    result = survey_releases(releases, cache, log=log)
    recs = [replay(v, cache, log=log) for v in replay_releases]
    return {"survey": result, "replays": recs, "source": f"measured now (cache {cache})"}


def load_findings(
    releases: list[str], live: bool = False, cache_dir: str | None = None, log: Callable[[str], None] = print
) -> dict:
    """Lint findings of every release, each triaged by a replay: shipped (dated) or measured now."""
    if not live:
        data = json.loads((ASSETS / "upstream_findings.json").read_text())
        data["source"] = f"shipped measurement ({data['generated_at']}, {data['measured_on']})"
        return data
    data = check(releases, replay=True, cache_dir=Path(cache_dir) if cache_dir else None, log=log)
    data["source"] = "measured now"
    return data


def replay_failures(replays: list[dict], expected: dict) -> list[str]:
    """Releases whose replay status differs from ``expected`` {release: status}."""
    got = {r["config"]["sglang"]: r["status"] for r in replays}
    return [f"sglang {v}: expected {want}, got {got.get(v)}" for v, want in expected.items() if got.get(v) != want]


def problems(data: dict, fid: dict, cells: list[dict], replay_releases: list[str]) -> list[str]:
    """What departs from upstream: replays not ending as released (0.5.12 / 0.5.13 crashed, later
    ok), fidelity differences, fuzzer cells that differ from what the declared contracts predict
    (a failure outside the pr-24860 hole, or a hole cell that passes)."""
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


def notebook_runs(data: dict, fid: dict, cells: list[dict], found: list[str]) -> dict[str, dict]:
    """The notebook record's runs: one run record per replayed release (role ``replay/<version>``)
    and a ``checks`` record (the primary) whose status is ok when nothing departs from upstream (else
    ``mismatch``, with the problems)."""
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
    return runs
