"""``workbench run``: one EAGLE3 (or greedy) run, its one-line summary and, with ``--json``, its record.

``--expect crashed|ok`` (the record's status words) makes the exit status say whether the run ended that
way (0 yes, 1 no), for scripts and ``git bisect run``; the default ``any`` exits 0 for a finished run (ok or
crashed) and 1 for a timeout or an error of the workbench itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

EXPECT = {"crashed": ("crashed",), "ok": ("ok",), "any": ("ok", "crashed")}


def cmd_run(args: argparse.Namespace) -> int:  # imports on use (workbench.cli docstring)
    from workbench.run.api import reproduce
    from workbench.run.config import config_from_args

    res = reproduce(config_from_args(args))
    print(res.summary())
    if args.json:
        print(f"record written to {res.save(args.json)}")
    if res.crash and args.show_traceback:
        print(res.crash.traceback)
    met = res.status in EXPECT[args.expect]
    if not met:
        print(f"expected {args.expect}, the run ended {res.status}: exit 1")
    return 0 if met else 1


def register(sub: argparse._SubParsersAction) -> None:  # imports on use (workbench.cli docstring)
    """Add ``run``."""
    from workbench.run.config import add_run_args

    p = sub.add_parser(
        "run",
        help="run EAGLE3 (or greedy) once and write the run record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_args(p)
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the run record here")
    p.add_argument("--show-traceback", action="store_true", help="print the crashing rank's traceback")
    p.add_argument(
        "--expect",
        choices=list(EXPECT),
        default="any",
        help="exit 0 when the run's status is this (any: ok or crashed), 1 otherwise (default: any)",
    )
    p.set_defaults(func=cmd_run)
