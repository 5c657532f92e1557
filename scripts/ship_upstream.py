"""Regenerate the shipped upstream measurements: the guard's findings with their verdicts for every
release, the reproducers of the newest release's confirmed findings, and the seed crash's records.

    python scripts/ship_upstream.py [--sglang X ...] [--parts findings repro seeds]
                                      # default: the final releases 0.5.10 to the newest, every part
    python scripts/ship_upstream.py --parts install-sites
                                      # once: the install sites of the shipped findings, by lint only

Writes ``workbench/assets/upstream_findings.json`` (lint + replay verdicts, with the command, the
date, the machine and the workbench commit; never the triage file that judges them: propose one to
review with ``workbench upstream triage --propose OUT --findings workbench/assets/upstream_findings.json``);
``workbench/assets/upstream_repro/`` (``workbench upstream repro``'s folders and index.json); and
``workbench/assets/upstream_replays.json`` (the seed crash's run record on 0.5.12, 0.5.13 and
0.5.14, each with the workbench commit). Needs the package registries the first time (wheels and
one dependency venv per range of releases, ~2.3 GiB each, cached under ~/.cache/eagle-workbench).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
from pathlib import Path

from packaging.version import Version

from workbench.run.provenance import workbench_commit
from workbench.run.serialise import ABSENT, to_dict
from workbench.upstream.context import UpstreamContext
from workbench.upstream.gate import install_site
from workbench.upstream.guard import check
from workbench.upstream.replay.records import seed_record
from workbench.upstream.replay.reproducers import reproducers
from workbench.upstream.sources.releases import check_versions, known_releases
from workbench.upstream.sources.trees import release_tree
from workbench.upstream.static.finding import (
    Finding,
    FindingRead,
    ReplayRun,
    ShippedFinding,
    ShippedReplay,
    read_findings,
)
from workbench.upstream.static.lint import analyse

ASSETS = Path(__file__).resolve().parent.parent / "workbench" / "assets"
PARTS = ("findings", "repro", "seeds")
EXTRA_PARTS = ("install-sites",)  # not in the default: a one-time conversion of the shipped findings
SEED_RELEASES = ("0.5.12", "0.5.13", "0.5.14")


def _shipped_replay(run: ReplayRun | None, stand_ins: list[str]) -> ShippedReplay | None:
    """The replay's deciding run, compact: how it ended (`status`, `stopped_at`), without its arguments and
    reads, its stand-ins as indices into the file's one `stand_ins` list (extended here)."""
    if not run:
        return None
    ids = []
    for s in run.stand_ins:
        if s not in stand_ins:
            stand_ins.append(s)
        ids.append(stand_ins.index(s))
    return ShippedReplay(
        case=run.case,
        batch=run.batch,
        spec_info_built_by=run.spec_info_built_by,
        status=run.status,
        stopped_at=run.stopped_at,
        exception=run.exception,
        raised_at=run.raised_at,
        library_call=run.library_call,
        idle_path=run.idle_path,
        unpadded=None if run.unpadded is ABSENT else run.unpadded,
        stand_ins=ids,
    )


def _slim(f: Finding, stand_ins: list[str]) -> ShippedFinding:
    """The finding, compact: installs counted, runner paths as counts per fate, reachability for
    confirmed findings only, the replay's deciding run (`_shipped_replay`) (the whole finding:
    `workbench upstream lint --json`)."""
    fates: dict[str, int] = {}
    for p in f.runner_paths:
        fates[p.get("fate", "?")] = fates.get(p.get("fate", "?"), 0) + 1
    read = {x.name: getattr(f, x.name) for x in dataclasses.fields(FindingRead)}
    return ShippedFinding(
        **read,
        set_later=f.set_later,
        verdict=f.verdict,
        verdict_reason=f.verdict_reason,
        verdict_by=f.verdict_by,
        key=f.key,
        static_verdict=f.static_verdict,
        static_reason=f.static_reason,
        replay_verdict=f.replay_verdict,
        replay_reason=f.replay_reason,
        installs=len(f.installs),
        install_sites=sorted({install_site(i.file, i.function) for i in f.installs}),
        runner_paths=fates,
        reachability=f.reachability if f.verdict == "confirmed" else None,
        replay=_shipped_replay(f.replay, stand_ins),
    )


def ship_seeds(ctx: UpstreamContext, commit: str) -> None:
    """The seed crash's run record on the releases before, with and after PR #28221."""
    records = []
    for v in SEED_RELEASES:
        rec = seed_record(ctx, v)
        rec["env"]["workbench_commit"] = commit
        records.append(rec)
    (ASSETS / "upstream_replays.json").write_text(json.dumps(records, indent=1) + "\n")


def ship_repro(ctx: UpstreamContext, versions: list[str]) -> None:
    out = ASSETS / "upstream_repro"
    shutil.rmtree(out, ignore_errors=True)
    index = reproducers(ctx, versions[-1], out, versions)
    index["command"] = (
        f"workbench upstream repro --sglang {versions[-1]} --out workbench/assets/upstream_repro "
        f"--range {' '.join(versions)}"
    )
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sglang", nargs="+", default=None, metavar="X")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS + EXTRA_PARTS)
    args = ap.parse_args()
    ctx = UpstreamContext()
    finals = [v for v in known_releases(ctx) if not Version(v).is_prerelease and Version(v) >= Version("0.5.10")]
    versions = sorted(check_versions(ctx, args.sglang) if args.sglang else finals, key=Version)
    commit = workbench_commit()
    if "seeds" in args.parts:
        ship_seeds(ctx, commit)
    if "repro" in args.parts:
        ship_repro(ctx, versions)
    if "findings" in args.parts:
        ship_findings(ctx, versions, commit)
    if "install-sites" in args.parts:
        add_install_sites(ctx, commit)
    print(f"wrote {', '.join(args.parts)} under {ASSETS} (workbench {commit})")
    return 0


def ship_findings(ctx: UpstreamContext, versions: list[str], commit: str) -> None:
    """The findings with their verdicts (the triage file that judges them is reviewed apart: the run
    it judges never writes it)."""
    result = check(ctx, versions, replay=True)
    command = f"python scripts/ship_upstream.py --sglang {' '.join(versions)}"
    stand_ins: list[str] = []
    findings = [to_dict(_slim(f, stand_ins)) for f in result["findings"]]
    data = {
        "shipped": True,
        "generated_at": result["generated_at"],
        "workbench_commit": commit,
        "measured_on": f"{platform.machine()} CPU, {platform.python_version()}; torch 2.13.0+cpu, triton 3.9.0 "
        "(TRITON_INTERPRET=1)",
        "command": command,
        "note": "per finding: installs counted, runner_paths as counts per fate, reachability for confirmed "
        "findings only, the replay without its arguments and reads, its stand_ins as indices into stand_ins; "
        "`workbench upstream lint --replay --json` writes them whole",
        "sources": result["sources"],
        "stand_ins": stand_ins,
        "findings": findings,
        "replays": {r["source"]: r["replay"] for r in result["results"]},
    }
    (ASSETS / "upstream_findings.json").write_text(json.dumps(data, indent=1) + "\n")


def add_install_sites(ctx: UpstreamContext, commit: str) -> None:
    """Give each shipped finding its `install_sites` (the triage keys' last part) from a lint-only run of
    its release at this commit; refuses unless every shipped finding is found again with the same read,
    first install and number of installs."""
    path = ASSETS / "upstream_findings.json"
    data = json.loads(path.read_text())
    findings = read_findings(data["findings"], f"{path.name}: findings")
    by_source: dict[str, list[ShippedFinding]] = {}
    for f in findings:
        if not isinstance(f, ShippedFinding):
            raise SystemExit(f"{path.name}: {f.key} is a whole finding (installs listed), not a shipped one: refused")
        by_source.setdefault(f.source, []).append(f)
    for source, shipped in by_source.items():
        analysis = analyse(release_tree(ctx, source.replace("sglang ", "")), paths=False)
        linted = [f for f in read_findings(analysis["findings"], source) if isinstance(f, Finding)]
        index = {(f.key, f.read_line, f.install_file, f.install_line): f for f in linted}
        for f in shipped:
            match = index.get((f.key, f.read_line, f.install_file, f.install_line))
            if match is None or len(match.installs) != f.installs:
                raise SystemExit(f"{source}: {f.key} at line {f.read_line} is not found again by the lint: refused")
            f.install_sites = sorted({install_site(i.file, i.function) for i in match.installs})
        print(f"{source}: install sites of {len(shipped)} finding(s)")
    data["findings"] = [to_dict(f) for f in findings]
    data["install_sites_by"] = {
        "command": "python scripts/ship_upstream.py --parts install-sites",
        "workbench_commit": commit,
        "note": "added to the findings of the run above by a lint-only run (ast) of the same releases; every "
        "finding was found again with the same read, first install and number of installs",
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    from workbench.run.supervisor import exits_on_sigterm

    raise SystemExit(exits_on_sigterm("scripts/ship_upstream.py", main))
