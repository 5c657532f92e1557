"""The ``workbench`` command line: one argparse tree, one module per command family.

Each family module has ``register(sub)``, which adds its sub-commands (with their flags, help and
``func``) to the tree; ``main`` parses, picks where the Triton kernels run (``workbench_kernels.setup``, this
process's entry point) before any command starts, and calls ``func``. Each command imports what it
runs when it runs (matplotlib, the engine and the upstream code take seconds to load), so a usage
error answers before any of it loads.
"""

from __future__ import annotations

import argparse
import sys

from workbench.cli import debug, experiments, run, upstream

FAMILIES = (run, experiments, debug, upstream)

EXIT_CODES = """\
exit codes (every command):
  0  done, and the outcome is the one asked for (run: --expect met; debug: the bundle's crash
     reproduced, or with --fix the metadata equal to the reference; contracts: every cell as its
     contract predicts; upstream: every replay conclusive, no untriaged finding, no fidelity difference)
  1  it ran, and the outcome is not the one asked for (run: --expect not met; bench: EAGLE3's output
     differs from greedy, or a run did not finish; compare, sweep: a run that did not finish; see
     each command's --help)
  2  usage error, before anything runs: an unknown flag or value, a refused crash bundle, an unknown
     release, a checkout that is not sglang (the message names the bad value and the valid ones)
  143  SIGTERM stopped it: the processes it started (DP ranks, a release's ranks) were ended first
"""


def build_parser() -> argparse.ArgumentParser:
    """The whole tree: ``workbench run|bench|compare|sweep|contracts|debug|upstream ...``."""
    ap = argparse.ArgumentParser(
        prog="workbench",
        description="EAGLE3 + DP-attention regression workbench: reproduce, debug, fix, measure the kv_indptr crash.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:  # imports on use (module docstring)
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the command; returns the exit code (table above)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else 2
    from workbench.models.loader import CheckpointError
    from workbench.run.config import ConfigError

    if getattr(args, "kernels", True):
        import workbench_kernels

        workbench_kernels.setup(getattr(args, "device", None) or "cpu")  # where the Triton kernels run, chosen once
    from workbench.run.supervisor import exits_on_sigterm

    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command line, for what a command records

    def run() -> int:
        try:
            return args.func(args)
        except (ConfigError, CheckpointError, ValueError) as e:  # bad values found after parsing
            print(f"workbench {args.cmd}: error: {e}", file=sys.stderr)
            return 2

    # SIGTERM: exit 143 after the finally blocks end what the command started
    return exits_on_sigterm(f"workbench {args.cmd}", run)


if __name__ == "__main__":
    sys.exit(main())
