"""``workbench debug BUNDLE [--fix pr-28221] [--json OUT] [--pdb]``: replay a crash bundle in this process.

Exit 0 when the replay behaves as recorded (without the fix: the recorded exception, same type,
message and innermost file:line; with the fix: metadata equal to the independent reference),
1 otherwise, 2 for a bundle that is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path


def _same_frame(exc: BaseException, recorded: dict) -> bool:
    fr = traceback.extract_tb(exc.__traceback__)[-1]
    return (type(exc).__name__, str(exc), fr.filename, fr.lineno) == (
        recorded["type"],
        recorded["message"],
        recorded["file"],
        recorded["line"],
    )


FIXES = ("pr-28221",)  # the fixes an in-process replay can apply


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``debug``."""
    ap = sub.add_parser(
        "debug",
        help="replay a crash bundle in this process (exit 0: the recorded crash, or with --fix the reference)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "bundle", type=Path, metavar="BUNDLE", help="a crash-bundle-rank<R> directory (crash.bundle of a run record)"
    )
    ap.add_argument(
        "--fix",
        choices=FIXES,
        default=None,
        help="apply this fix for the replay (pr-28221: PR #28221's kv_indptr = None, so the seq_lens fallback); "
        "as 'upstream run --fix' names the fixes it applies",
    )
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the replay's result here (JSON)")
    ap.add_argument("--pdb", action="store_true", help="open pdb in the failing frame (post-mortem)")
    ap.set_defaults(func=cmd_debug)


def cmd_debug(args: argparse.Namespace) -> int:  # imports on use (workbench.cli docstring)
    from workbench.debug.bundle import BundleError
    from workbench.debug.load import load_bundle
    from workbench.debug.replay import replay_crash

    try:
        b = load_bundle(args.bundle)
    except BundleError as e:
        print(f"workbench debug: error: {e}", file=sys.stderr)
        return 2
    print(b.summary())
    report: dict = {"bundle": str(b.path), "fix": args.fix is not None, "recorded": b.meta["exception"]}
    try:
        res = replay_crash(b, fix=args.fix is not None)
    except Exception as e:
        fr = traceback.extract_tb(e.__traceback__)[-1]
        same = _same_frame(e, b.meta["exception"])
        print(f"\nreplayed in-process: {type(e).__name__}: {e}\n  at {fr.filename}:{fr.lineno} in {fr.name}")
        print("  same exception and innermost frame as recorded" if same else "  DIFFERS from the recorded exception")
        print(f"  (--pdb opens the debugger there; in Jupyter: workbench.replay_crash({str(b.path)!r}), then %debug)")
        report.update(
            raised={
                "type": type(e).__name__,
                "message": str(e),
                "file": fr.filename,
                "line": fr.lineno,
                "function": fr.name,
            },
            reproduced=same,
        )
        ok = same
        if args.pdb:
            import pdb

            pdb.post_mortem(e.__traceback__)
    else:
        print("\n" + res.summary())
        report.update(result=res.to_dict(), reproduced=False)
        ok = bool(res.fix and res.matches_reference)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
        print(f"written to {args.json}")
    return 0 if ok else 1
