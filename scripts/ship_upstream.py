"""Regenerate the shipped upstream measurements: the guard's findings with their verdicts for every
release, the reproducers of the newest release's confirmed findings, and the seed crash's records.

    python scripts/ship_upstream.py [--sglang X ...] [--parts findings repro seeds]
                                      # default: the final releases 0.5.10 to the newest, every part

Writes ``workbench/assets/upstream_findings.json`` (lint + replay verdicts, with the command, the
date, the machine and the workbench commit), ``workbench/assets/upstream_repro/`` (``workbench
upstream repro``'s folders and index.json) and ``workbench/assets/upstream_replays.json`` (the seed
crash's run record on 0.5.12, 0.5.13 and 0.5.14, each with the workbench commit). Needs the
package registries the first time (wheels and one dependency venv per range of releases, ~2.3 GiB
each, cached under ~/.cache/eagle-workbench).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path

from packaging.version import Version

from workbench.upstream.context import UpstreamContext
from workbench.upstream.guard import check
from workbench.upstream.replay.records import seed_record
from workbench.upstream.replay.repro import reproducers, workbench_commit
from workbench.upstream.sources.releases import check_versions, known_releases

ASSETS = Path(__file__).resolve().parent.parent / "workbench" / "assets"
PARTS = ("findings", "repro", "seeds")
SEED_RELEASES = ("0.5.12", "0.5.13", "0.5.14")


def _slim(f: dict) -> dict:
    """The finding with each runner path cut to its ends (the shipped file stays a few MB)."""
    paths = []
    for p in f.get("runner_paths") or []:
        chain = p.get("path") or []
        ends = [chain[0], chain[-1]] if len(chain) > 2 else chain
        paths.append({k: v for k, v in p.items() if k != "path"} | ({"path": ends} if chain else {}))
    return {**f, "runner_paths": paths}


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
    index["command"] = f"workbench upstream repro --sglang {versions[-1]} --out workbench/assets/upstream_repro"
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sglang", nargs="+", default=None, metavar="X")
    ap.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
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
    print(f"wrote {', '.join(args.parts)} under {ASSETS} (workbench {commit})")
    return 0


def ship_findings(ctx: UpstreamContext, versions: list[str], commit: str) -> None:
    result = check(ctx, versions, replay=True)
    data = {
        "shipped": True,
        "generated_at": result["generated_at"],
        "workbench_commit": commit,
        "measured_on": f"{platform.machine()} CPU, {platform.python_version()}; torch 2.13.0+cpu, triton 3.9.0 "
        "(TRITON_INTERPRET=1)",
        "command": f"python scripts/ship_upstream.py --sglang {' '.join(versions)}",
        "note": "runner_paths shortened to each install's outcome and the ends of its path (the first and "
        "last call); `workbench upstream lint --json` writes them whole",
        "sources": result["sources"],
        "findings": [_slim(f) for f in result["findings"]],
        "replays": {r["source"]: r["replay"] for r in result["results"]},
    }
    (ASSETS / "upstream_findings.json").write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
