"""Command line: ``workbench run``, ``bench``, ``compare``, ``sweep``, ``upstream``, ``contracts``, ``debug``.

Each command imports what it runs when it runs (torch, matplotlib and the engine take seconds to
load), so ``workbench --help`` and a usage error answer at once. ``main`` is this process's entry
point: it chooses where the Triton kernels run (``kernels.setup``) before any command starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_run(args: argparse.Namespace) -> int:  # imports on use (module docstring)
    from workbench.run.api import reproduce
    from workbench.run.config import config_from_args

    res = reproduce(config_from_args(args))
    print(res.summary())
    if args.json:
        print(f"record written to {res.save(args.json)}")
    if res.crash and args.show_traceback:
        print(res.crash["traceback"])
    return 0


def cmd_bench(args: argparse.Namespace) -> int:  # imports on use (module docstring)
    """Exit 0 when every EAGLE3 run generated the greedy tokens, 1 when any did not (2: bad input)."""
    from workbench.experiments.bench import bench
    from workbench.experiments.definition import COMPARISON
    from workbench.run.config import config_from_args, make_config
    from workbench.views.display import progress

    config = COMPARISON.apply(config_from_args(args))
    backends = args.backends or [make_config(config).backend]
    repeats = args.repeats or COMPARISON.repeats
    with progress("bench", disable=None) as on_event:  # a bar on a terminal (stderr), none in a log
        out = bench(config, backends=backends, repeats=repeats, json_out=args.json, on_event=on_event)
    if not out["lossless_all"]:
        print("workbench bench: EAGLE3 outputs differ from greedy (not lossless)", file=sys.stderr)
        return 1
    return 0


def cmd_compare(args: argparse.Namespace) -> int:  # imports on use (module docstring)
    from workbench.experiments.compare import compare, format_text
    from workbench.experiments.definition import COMPARISON
    from workbench.run.config import config_from_args
    from workbench.views.display import progress

    with progress("compare", disable=None) as on_event:
        doc = compare(
            COMPARISON.apply(config_from_args(args)),
            backends=args.backends,
            repeats=args.repeats or COMPARISON.repeats,
            dps=args.dps,
            json_out=args.json,
            verbose=False,
            on_event=on_event,
        )
    print(format_text(doc))  # after the bar has closed
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:  # imports on use (module docstring)
    from workbench.experiments.sweep import merge, save, sweep
    from workbench.run.config import config_from_args
    from workbench.views.display import progress

    if args.merge:
        doc = merge([json.loads(Path(p).read_text()) for p in args.merge])
    else:
        settings = [tuple(int(x) for x in s.split(",")) for s in args.settings]
        with progress("sweep", disable=None) as on_event:
            quiet = sys.stderr.isatty()  # on a terminal the bar names each run; in a log, one line per run
            doc = sweep(config_from_args(args), args.backends, settings, args.dtypes, not quiet, on_event=on_event)
    print("\n".join(doc["findings"]))
    if args.json:
        print(f"sweep written to {save(doc, Path(args.json))}")
    return 0


def main(argv: list[str] | None = None) -> int:  # imports on use (module docstring)
    from workbench.models.loader import CheckpointError
    from workbench.run.config import ConfigError, add_run_args

    ap = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run EAGLE3 (or greedy) once and write the run record")
    add_run_args(run)
    run.add_argument("--json", default=None, help="write the run record here")
    run.add_argument("--show-traceback", action="store_true")
    run.set_defaults(func=cmd_run)
    b = sub.add_parser(
        "bench",
        help="plain greedy vs EAGLE3 on the same backend(s): accept length, tokens/s, speedup",
        description="Unless given, the spec setting, prompts, new tokens, threads, batch size and repeats are "
        "the comparison's (workbench.experiments.definition, docs/guide.md); naming any of --steps/--topk/"
        "--draft-tokens keeps the run defaults for the others. Exit 0 when EAGLE3 was lossless, 1 when not.",
    )
    add_run_args(b, exclude=("mode",))
    b.add_argument("--backends", nargs="+", default=None)
    b.add_argument("--repeats", type=int, default=None, help="paired repeats (default: the comparison's, 6)")
    b.add_argument("--json", default=None)
    b.set_defaults(func=cmd_bench)
    c = sub.add_parser(
        "compare",
        help="backends x greedy/EAGLE3 (x dp) in paired repeats: medians, intervals, speedups, verdicts",
        description="Unless given, the settings are the comparison's (as bench).",
    )
    add_run_args(c, exclude=("mode", "backend", "dp"))
    c.add_argument("--backends", nargs="+", default=["triton", "flashinfer", "fa3", "torch_native"])
    c.add_argument("--repeats", type=int, default=None, help="paired repeats (default: the comparison's, 6)")
    c.add_argument("--dps", type=int, nargs="+", default=[1], help="DP sizes to compare (e.g. 1 2)")
    c.add_argument("--json", default=None)
    c.set_defaults(func=cmd_compare)
    sw = sub.add_parser("sweep", help="acceptance over (steps, topk, draft_tokens) per backend and dtype")
    add_run_args(sw, exclude=("mode", "backend", "dtype", "steps", "topk", "draft_tokens"))
    sw.add_argument("--backends", nargs="+", default=["torch_native"])
    sw.add_argument("--dtypes", nargs="+", default=["float32"], help="float32 and/or bfloat16")
    sw.add_argument(
        "--settings",
        nargs="+",
        default=["1,1,2", "3,1,4", "3,2,6", "7,1,8", "5,4,16", "6,10,32"],  # = workbench.experiments.sweep.SETTINGS
        help="steps,topk,draft_tokens triples",
    )
    sw.add_argument("--merge", nargs="+", default=None, help="merge sweep JSONs run in parts (nothing is run)")
    sw.add_argument("--json", default=None)
    sw.set_defaults(func=cmd_sweep)
    up = sub.add_parser("upstream", help="survey / replay the real SGLang releases (see workbench.upstream)")
    up.add_argument("rest", nargs=argparse.REMAINDER)
    up.set_defaults(func=lambda a: _delegate("workbench.upstream.cli", a.rest))
    ct = sub.add_parser(
        "contracts", help="fuzz every backend x spec-input x forward mode through init_forward_metadata"
    )
    ct.add_argument("rest", nargs=argparse.REMAINDER)
    ct.set_defaults(func=lambda a: _delegate("workbench.experiments.contracts", a.rest))
    dbg = sub.add_parser("debug", help="replay a crash bundle in this process (see workbench.debug.cli)")
    dbg.add_argument("rest", nargs=argparse.REMAINDER)
    dbg.set_defaults(func=lambda a: _delegate("workbench.debug.cli", a.rest))
    args = ap.parse_args(argv)
    import kernels

    kernels.setup(getattr(args, "device", None) or "cpu")  # where the Triton kernels run, chosen once
    try:
        return args.func(args)
    except (ConfigError, CheckpointError, ValueError) as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2


def _delegate(module: str, rest: list[str]) -> int:  # imports on use (module docstring)
    import importlib

    return importlib.import_module(module).main(rest)


if __name__ == "__main__":
    sys.exit(main())
