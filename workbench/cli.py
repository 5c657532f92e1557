"""Command line: ``workbench run``, ``workbench bench``, ``workbench upstream``, ``workbench contracts``."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def cmd_run(args: argparse.Namespace) -> int:
    from workbench.api import reproduce
    from workbench.config import config_from_args

    res = reproduce(config_from_args(args))
    print(res.summary())
    if args.json:
        print(f"record written to {res.save(args.json)}")
    if res.crash and args.show_traceback:
        print(res.crash["traceback"])
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from workbench.bench import bench
    from workbench.config import config_from_args, make_config

    config = config_from_args(args)
    bench(config, backends=args.backends or [make_config(config).backend], repeats=args.repeats, json_out=args.json)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    from workbench.config import ConfigError, add_run_args
    from workbench.models.loader import CheckpointError

    ap = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run EAGLE3 (or greedy) once and write the run record")
    add_run_args(run)
    run.add_argument("--json", default=None, help="write the run record here")
    run.add_argument("--show-traceback", action="store_true")
    run.set_defaults(func=cmd_run)
    b = sub.add_parser("bench", help="plain greedy vs EAGLE3 on the same backend(s): accept length, tokens/s, speedup")
    add_run_args(b, exclude=("mode",))
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
    args = ap.parse_args(argv)
    import kernels

    kernels.setup()  # where the Triton kernels run, chosen once before anything else loads them
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
