"""Regenerate ``workbench/assets/upstream_bundle_replay.json``: a crash bundle that the workbench's own crash
capture writes, replayed on real SGLang releases, with its provenance.

    python scripts/ship_bundle_replay.py [--sglang 0.5.13 0.5.14] [--out FILE]

1. The run (``RUN`` below, offline): the workbench's pr-24860 triton backend at DP 2 on one prompt, packed
   onto rank 0, so rank 1 runs the padded-IDLE draft-extend and crashes; its crash capture writes
   ``crash-bundle-rank1/`` into a scratch folder (``$WB_BUNDLE_DIR``), removed afterwards.
2. ``workbench upstream replay --bundle`` of that folder on each release (network: the releases' wheels and
   dependency venvs, cached after the first time); its ``--json`` output is the asset's body.
3. The asset: that output, with ``workbench_commit``, ``command``, ``measured_on`` and ``bundle_run`` (the
   run's settings and how it ended) added, and ``bundle`` naming the folder without its scratch path.

Exit codes: 0 written; 1 the run did not crash as the bundle needs, or a release's replay does not agree
with the bundle (the replay command's exit 1); nothing is written then; 2 the replay could not run, or a
usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "workbench" / "assets" / "upstream_bundle_replay.json"
RELEASES = ("0.5.13", "0.5.14")
RUN = {
    "backend": "triton",
    "revision": "pr-24860",
    "dp": 2,
    "dp_policy": "pack",
    "steps": 3,
    "topk": 2,
    "draft_tokens": 4,
    "max_new_tokens": 8,
    "prompts": ["def f(x):\n"],
    "timeout_s": 600,
}


def crash_bundle(scratch: Path) -> tuple[Path | None, dict]:
    """Run ``RUN``; (the crashing rank's bundle folder or None, what the run was and how it ended)."""
    import workbench
    from workbench.debug.bundle import BUNDLE_DIR_ENV

    saved = os.environ.get(BUNDLE_DIR_ENV)
    os.environ[BUNDLE_DIR_ENV] = str(scratch)
    try:
        res = workbench.reproduce(**RUN)
    finally:
        if saved is None:
            os.environ.pop(BUNDLE_DIR_ENV, None)
        else:
            os.environ[BUNDLE_DIR_ENV] = saved
    crash = res.crash
    about = {
        "settings": {k: v for k, v in RUN.items() if k != "timeout_s"},
        "status": res.status,
        "crash": {
            k: getattr(crash, k) for k in ("rank", "phase", "forward_mode", "batch_size", "exception_type", "message")
        }
        if crash
        else None,
        "kernel": res.record.config.get("kernel"),
        "workbench_commit": res.record.env.get("workbench_commit"),
    }
    bundle = crash.bundle if crash else None
    return (Path(bundle) if res.status == "crashed" and bundle else None), about


def asset(replayed: dict, about: dict, bundle: Path, command: str, commit: str | None) -> dict:
    """The shipped document: the replay command's output with the provenance it lacks."""
    return {
        "shipped": True,
        "workbench_commit": commit,
        "command": command,
        "measured_on": f"{platform.machine()} CPU, {os.cpu_count()} cores, python {platform.python_version()}",
        **replayed,
        "bundle": f"{bundle.name} (written by bundle_run into a scratch folder, removed after the replay)",
        "bundle_run": about,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--sglang", nargs="+", default=list(RELEASES), metavar="X", help="releases to replay the bundle on")
    ap.add_argument("--out", type=Path, default=SHIPPED, help="where to write the asset (default: the shipped one)")
    args = ap.parse_args(argv)
    from workbench.cli import main as workbench_main
    from workbench.run.provenance import workbench_commit

    command = "python scripts/ship_bundle_replay.py --sglang " + " ".join(args.sglang)
    if args.out != SHIPPED:
        command += f" --out {args.out}"
    scratch = Path(tempfile.mkdtemp(prefix="wb-bundle-replay-"))
    try:
        bundle, about = crash_bundle(scratch)
        if bundle is None:
            print(f"the run did not leave a crash bundle: {json.dumps(about)}", file=sys.stderr)
            return 1
        replay_json = scratch / "replay.json"
        rc = workbench_main(
            ["upstream", "replay", "--bundle", str(bundle), "--sglang", *args.sglang, "--json", str(replay_json)]
        )
        if rc != 0:
            print(f"the replay ended {rc}: nothing written to {args.out}", file=sys.stderr)
            return rc
        doc = asset(json.loads(replay_json.read_text()), about, bundle, command, workbench_commit())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} (workbench {doc['workbench_commit']})")
    return 0


if __name__ == "__main__":
    from workbench.run.supervisor import exits_on_sigterm

    sys.exit(exits_on_sigterm("scripts/ship_bundle_replay.py", main))
