"""The same DP ranks under ``torchrun`` (rank, world size and rendezvous from its environment).

    torchrun --nproc-per-node 2 --log-dir DIR/torchrun -m workbench.run.dp.torchrun --out DIR [workbench run options]
    python -m workbench.run.dp.torchrun --merge DIR [--json rec.json]

Each rank writes its events to DIR/rank<R>.jsonl; a rank that fails exits non-zero so torchrun
ends the others; ``--merge`` turns the files into one run record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from workbench.models.loader import load_prompts
from workbench.run.config import RunConfig, add_run_args, config_from_args, make_config
from workbench.run.dp.collect import Collector
from workbench.run.dp.policy import assign
from workbench.run.dp.rank import Emitter, rank_main
from workbench.run.record import RankReport, RunRecord, RunResult


def _run(args: argparse.Namespace) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cfg = make_config(config_from_args(args), dp=world)
    prompts = cfg.prompts if cfg.prompts is not None else load_prompts()
    plan = assign(len(prompts), world, cfg.dp_policy, cfg.max_running)
    args.out.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        (args.out / "job.json").write_text(
            json.dumps({"config": cfg.to_dict(), "prompts": prompts, "assignment": plan})
        )
    with open(args.out / f"rank{rank}.jsonl", "w") as f:
        out = Emitter(f)
        rank_main(
            rank,
            world,
            "env://",
            cfg.to_dict(),
            prompts,
            plan[rank],
            out,
            min(cfg.timeout_s, 120.0),
            bundle_dir=str(args.out),
        )
    events = [json.loads(line) for line in (args.out / f"rank{rank}.jsonl").read_text().splitlines()]
    failed = any(kind == "done" and RankReport.from_event(payload).crash for kind, _, payload in events)
    return 1 if failed else 0


def merge(directory: Path) -> RunRecord:
    """One run record from a torchrun job's event files (ranks that never finished count as died)."""
    job = json.loads((directory / "job.json").read_text())
    cfg = RunConfig(**job["config"])
    col = Collector(cfg)
    for r in range(cfg.dp):
        path = directory / f"rank{r}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            col.feed(*json.loads(line))
        if r not in col.results:
            col.rank_died(r, None, None)
    timing = col.timing()
    wall = timing["generation_s"] or 0.0  # torchrun's own start is not ours to see: wall = generation span
    return col.record(
        job["prompts"],
        wall,
        None,
        {"assignment": job["assignment"], "init_method": "env:// (torchrun)", "logs": str(directory)},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m workbench.run.dp.torchrun",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_args(ap, exclude=("dp",))  # the world size is torchrun's
    ap.add_argument("--out", type=Path, default=Path("runs/torchrun"))
    ap.add_argument("--merge", type=Path, default=None, help="merge a finished job's directory into a record")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.merge is None:
        return _run(args)

    res = RunResult(merge(args.merge))
    print(res.summary())
    if args.json:
        print(f"record written to {res.save(args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
