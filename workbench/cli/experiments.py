"""``workbench bench``, ``compare``, ``sweep``, ``contracts``: the experiments over backends, modes and settings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_bench(args: argparse.Namespace) -> int:  # imports on use (workbench.cli docstring)
    """Exit 0 when every EAGLE3 run generated the greedy tokens, 1 when any did not (2: bad input)."""
    from workbench.experiments.bench import bench
    from workbench.experiments.definition import COMPARISON
    from workbench.run.config import config_from_args
    from workbench.views.display import progress

    config = COMPARISON.apply(config_from_args(args))
    repeats = args.repeats or COMPARISON.repeats
    with progress("bench", disable=None) as on_event:  # a bar on a terminal (stderr), none in a log
        out = bench(config, backends=args.backends, repeats=repeats, json_out=args.json, on_event=on_event)
    if not out["lossless_all"]:
        print("workbench bench: EAGLE3 outputs differ from greedy (not lossless)", file=sys.stderr)
        return 1
    return 0


def cmd_compare(args: argparse.Namespace) -> int:  # imports on use (workbench.cli docstring)
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
    return 1 if doc["failed"] else 0


def cmd_sweep(args: argparse.Namespace) -> int:  # imports on use (workbench.cli docstring)
    from workbench.experiments.sweep import merge, save, sweep
    from workbench.run.config import config_from_args
    from workbench.views.display import progress

    if args.merge:
        doc = merge([json.loads(Path(p).read_text()) for p in args.merge])
    else:
        settings = [tuple(int(x) for x in s.split(",")) for s in args.settings]
        with progress("sweep", disable=None) as on_event:
            quiet = sys.stderr.isatty()  # on a terminal the bar names each run; in a log, one line per run
            doc = sweep(
                config_from_args(args), args.backends, settings, args.dtypes, verbose=not quiet, on_event=on_event
            )
    print("\n".join(doc["findings"]))
    if args.json:
        print(f"sweep written to {save(doc, Path(args.json))}")
    return 0


def cmd_contracts(args: argparse.Namespace) -> int:  # imports on use (workbench.cli docstring)
    from workbench.experiments.contracts import format_failures, run_matrix, unexpected

    rows = run_matrix(args.backends, args.revisions)
    print(format_failures(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
        print(f"cells written to {args.json}")
    return 1 if unexpected(rows) else 0


# What a bare ``bench`` and ``compare`` run: the torch paths, minutes. The triton backend's kernels run in
# Triton's interpreter on a CPU (two orders of magnitude slower: hours for a comparison), so it runs when named.
BENCH_BACKENDS = ["torch_native"]
COMPARE_BACKENDS = ["torch_native", "flashinfer", "fa3"]
TRITON_NOTE = "triton runs in Triton's interpreter on a CPU (hours): name it to run it"


def comparison_defaults() -> dict[str, str]:  # imports on use (workbench.cli docstring)
    """The run settings ``bench`` and ``compare`` take from the comparison unless given, as their help shows them."""
    from workbench.experiments.definition import COMPARISON, SPEC_KEYS
    from workbench.run.config import RunConfig

    run = RunConfig()
    shown = {
        key: f"{getattr(COMPARISON, key)}, the comparison's; {getattr(run, key)} when another of "
        + "/".join("--" + k.replace("_", "-") for k in SPEC_KEYS if k != key)
        + " is given"
        for key in SPEC_KEYS
    }
    for key in ("max_new_tokens", "max_running", "threads"):
        if getattr(COMPARISON, key) is not None:  # threads None: the run's own default, which its help states
            shown[key] = f"{getattr(COMPARISON, key)}, the comparison's"
    return shown


def register(sub: argparse._SubParsersAction) -> None:  # imports on use (workbench.cli docstring)
    """Add ``bench``, ``compare``, ``sweep`` and ``contracts``."""
    from workbench.backends import backend_names
    from workbench.experiments.definition import COMPARISON
    from workbench.experiments.sweep import SETTINGS
    from workbench.run.config import DTYPES, REVISION_NAMES, add_run_args

    shown = comparison_defaults()

    raw = argparse.RawDescriptionHelpFormatter
    b = sub.add_parser(
        "bench",
        help="plain greedy vs EAGLE3 on the same backend(s): accept length, tokens/s, speedup",
        description="Plain greedy vs EAGLE3 on the same backend(s), in paired repeats. Unless given, the spec "
        "setting, prompts, new tokens, threads, batch size and repeats are the comparison's "
        "(workbench.experiments.definition, docs/guide.md); naming any of --steps/--topk/--draft-tokens keeps "
        "the run defaults for the others. Exit 0 when EAGLE3 was lossless, 1 when not.",
    )
    add_run_args(b, exclude=("mode", "backend"), defaults=shown)
    b.add_argument(
        "--backends",
        nargs="+",
        default=BENCH_BACKENDS,
        choices=backend_names(),
        metavar="BACKEND",
        help=f"attention backends, each benched on its own (default: {' '.join(BENCH_BACKENDS)}; {TRITON_NOTE})",
    )
    b.add_argument(
        "--repeats", type=int, default=None, help=f"paired repeats (default: {COMPARISON.repeats}, the comparison's)"
    )
    b.add_argument(
        "--json", type=Path, default=None, metavar="OUT", help="write the medians, intervals and records here"
    )
    b.set_defaults(func=cmd_bench)
    c = sub.add_parser(
        "compare",
        help="backends x greedy/EAGLE3 (x dp) in paired repeats: medians, intervals, speedups, verdicts",
        description="Every backend x mode (x dp) in paired repeats, each repeat in a random order; medians "
        "with order-statistic intervals and their exact coverage; paired ratios read as faster, slower or "
        "undecided. Unless given, the settings are the comparison's (as bench). Exit 1 when a run failed.",
    )
    add_run_args(c, exclude=("mode", "backend", "dp"), defaults=shown)
    c.add_argument(
        "--backends",
        nargs="+",
        default=COMPARE_BACKENDS,
        choices=backend_names(),
        metavar="BACKEND",
        help=f"attention backends to compare (default: {' '.join(COMPARE_BACKENDS)}, the torch paths: flashinfer "
        f"and fa3 compute attention with a torch stand-in for their GPU kernels; {TRITON_NOTE})",
    )
    c.add_argument(
        "--repeats", type=int, default=None, help=f"paired repeats (default: {COMPARISON.repeats}, the comparison's)"
    )
    c.add_argument("--dps", type=int, nargs="+", default=[1], help="DP sizes to compare (default: 1; e.g. 1 2)")
    c.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the comparison here")
    c.set_defaults(func=cmd_compare)
    sw = sub.add_parser(
        "sweep",
        help="acceptance over (steps, topk, draft_tokens) per backend and dtype",
        description="Accept length and acceptance per draft position per (steps, topk, draft tokens) "
        "setting, backend and dtype; each output compared with the float32 greedy output.",
    )
    add_run_args(sw, exclude=("mode", "backend", "dtype", "steps", "topk", "draft_tokens"))
    sw.add_argument(
        "--backends",
        nargs="+",
        default=["torch_native"],
        choices=backend_names(),
        metavar="BACKEND",
        help="attention backends (default: torch_native; triton runs in Triton's interpreter on a CPU: hours)",
    )
    sw.add_argument(
        "--dtypes",
        nargs="+",
        default=["float32"],
        choices=DTYPES,
        help="dtypes of each setting's runs (default: float32)",
    )
    sw.add_argument(
        "--settings",
        nargs="+",
        default=[",".join(map(str, s)) for s in SETTINGS],
        metavar="S,K,N",
        help="steps,topk,draft_tokens triples (default: the shipped sweep's, "
        + " ".join(",".join(map(str, s)) for s in SETTINGS)
        + ")",
    )
    sw.add_argument(
        "--merge", nargs="+", default=None, metavar="JSON", help="merge sweep JSONs run in parts (nothing is run)"
    )
    sw.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the sweep document here")
    sw.set_defaults(func=cmd_sweep)
    ct = sub.add_parser(
        "contracts",
        help="fuzz every backend x spec-input x forward mode through init_forward_metadata",
        description="Every backend x spec-input class (per revision) x forward mode through "
        "init_forward_metadata on a minimal valid batch. Exit 1 when a cell differs from what the "
        "declared contracts predict (a backend reading kv_indptr must fail where the class lacks it).",
        formatter_class=raw,
    )
    ct.add_argument(
        "--backends",
        nargs="+",
        default=None,
        choices=backend_names(),
        metavar="BACKEND",
        help=f"attention backends (default: all, {' '.join(backend_names())}; no model runs, seconds)",
    )
    ct.add_argument(
        "--revisions",
        nargs="+",
        default=None,
        choices=REVISION_NAMES,
        metavar="REVISION",
        help=f"code states of the draft-extend spec_info (default: all, {' '.join(REVISION_NAMES)})",
    )
    ct.add_argument("--json", type=Path, default=None, metavar="OUT", help="write every cell here")
    ct.set_defaults(func=cmd_contracts)
