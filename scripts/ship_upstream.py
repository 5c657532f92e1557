"""Regenerate the shipped upstream measurements: the guard's findings with their verdicts for every
release, and the reproducers of the newest release's confirmed findings.

    python scripts/ship_upstream.py [--sglang X ...]     # default: the final releases 0.5.10 to the newest

Writes ``workbench/assets/upstream_findings.json`` (lint + replay verdicts, with the command, the
date, the machine and the workbench commit) and ``workbench/assets/upstream_repro/`` (``workbench
upstream repro``'s folders and index.json). Needs the package registries the first time (wheels and
one dependency venv per range of releases, ~2.3 GiB each, cached under ~/.cache/eagle-workbench).
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
from workbench.upstream.replay.repro import reproducers, workbench_commit
from workbench.upstream.sources.releases import check_versions, known_releases

ASSETS = Path(__file__).resolve().parent.parent / "workbench" / "assets"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sglang", nargs="+", default=None, metavar="X")
    args = ap.parse_args()
    ctx = UpstreamContext()
    finals = [v for v in known_releases(ctx) if not Version(v).is_prerelease and Version(v) >= Version("0.5.10")]
    versions = sorted(check_versions(ctx, args.sglang) if args.sglang else finals, key=Version)
    commit = workbench_commit()
    result = check(ctx, versions, replay=True)
    data = {
        "shipped": True,
        "generated_at": result["generated_at"],
        "workbench_commit": commit,
        "measured_on": f"{platform.machine()} CPU, {platform.python_version()}; torch 2.13.0+cpu, triton 3.9.0 "
        "(TRITON_INTERPRET=1)",
        "command": f"python scripts/ship_upstream.py --sglang {' '.join(versions)}",
        "sources": result["sources"],
        "findings": result["findings"],
        "replays": {r["source"]: r["replay"] for r in result["results"]},
    }
    (ASSETS / "upstream_findings.json").write_text(json.dumps(data, indent=1) + "\n")
    out = ASSETS / "upstream_repro"
    shutil.rmtree(out, ignore_errors=True)
    index = reproducers(ctx, versions[-1], out, versions)
    index["command"] = f"workbench upstream repro --sglang {versions[-1]} --out workbench/assets/upstream_repro"
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"wrote {ASSETS / 'upstream_findings.json'} and {out} (workbench {commit})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
