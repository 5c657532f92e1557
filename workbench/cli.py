"""Command line: ``workbench run``, ``bench``, ``upstream``, ``contracts``, ``debug``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="triton")
    p.add_argument("--revision", default="pr-28221")
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--topk", type=int, default=4)
    p.add_argument("--draft-tokens", type=int, default=16)
    p.add_argument("--prompts", nargs="+", default=None, help="prompt strings (default: the shipped set)")
    p.add_argument("--prompts-file", type=Path, default=None, help="JSON list of prompt strings")
    p.add_argument("--num-prompts", type=int, default=None, help="use the first N prompts")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-running", type=int, default=20)
    p.add_argument("--dp-policy", default="balanced")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--model-dir", default=None)


def _config(args: argparse.Namespace, **extra) -> dict:
    prompts = args.prompts
    if args.prompts_file is not None:
        prompts = json.loads(args.prompts_file.read_text())
    if args.num_prompts is not None:
        from workbench.models.loader import load_prompts

        prompts = (prompts or load_prompts())[: args.num_prompts]
    return dict(
        backend=args.backend, revision=args.revision, dp=args.dp, steps=args.steps, topk=args.topk,
        draft_tokens=args.draft_tokens, prompts=prompts, max_new_tokens=args.max_new_tokens,
        max_running=args.max_running, dp_policy=args.dp_policy, seed=args.seed, timeout_s=args.timeout,
        model_dir=args.model_dir, **extra,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from workbench.api import reproduce

    res = reproduce(_config(args, mode=args.mode))
    print(res.summary())
    if args.json:
        print(f"record written to {res.save(args.json)}")
    if res.crash and args.show_traceback:
        print(res.crash["traceback"])
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from workbench.bench import bench

    bench(_config(args), backends=args.backends or [args.backend], repeats=args.repeats, json_out=args.json)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    from workbench.config import ConfigError
    from workbench.models.loader import CheckpointError

    ap = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run EAGLE3 (or greedy) once and write the run record")
    _add_run_args(run)
    run.add_argument("--mode", default="eagle", help="eagle or greedy")
    run.add_argument("--json", default=None, help="write the run record here")
    run.add_argument("--show-traceback", action="store_true")
    run.set_defaults(func=cmd_run)
    b = sub.add_parser("bench", help="plain greedy vs EAGLE3 on the same backend(s): accept length, tokens/s, speedup")
    _add_run_args(b)
    b.add_argument("--backends", nargs="+", default=None)
    b.add_argument("--repeats", type=int, default=1)
    b.add_argument("--json", default=None)
    b.set_defaults(func=cmd_bench)
    up = sub.add_parser("upstream", help="survey / replay the real SGLang releases (see workbench.upstream)")
    up.add_argument("rest", nargs=argparse.REMAINDER)
    up.set_defaults(func=lambda a: _delegate("workbench.upstream.cli", a.rest))
    ct = sub.add_parser("contracts", help="fuzz every backend x spec-input x forward mode through init_forward_metadata")
    ct.add_argument("rest", nargs=argparse.REMAINDER)
    ct.set_defaults(func=lambda a: _delegate("workbench.contracts", a.rest))
    dbg = sub.add_parser("debug", help="replay a crash bundle in this process (see workbench.debug.cli)")
    dbg.add_argument("rest", nargs=argparse.REMAINDER)
    dbg.set_defaults(func=lambda a: _delegate("workbench.debug.cli", a.rest))
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, CheckpointError) as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2


def _delegate(module: str, rest: List[str]) -> int:
    import importlib

    return importlib.import_module(module).main(rest)


if __name__ == "__main__":
    sys.exit(main())
