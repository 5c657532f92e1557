"""``workbench upstream survey|lint|recall|corpus|sites|family|triage|bisect|replay|repro|run|explore|kernel|fidelity|
nightly``: the real SGLang releases.

Each subcommand imports what it runs when it runs (the replays, the released runtime and the fidelity
check load torch, the survey plot matplotlib), so ``--help`` and a usage error answer at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from workbench.upstream.context import UpstreamContext, default_cache_dir, echo


def register(top: argparse._SubParsersAction) -> None:
    """Add ``upstream`` and its sub-commands; ``--cache-dir`` is taken before or after the sub-command."""
    parser = top.add_parser(
        "upstream",
        help="the real SGLang releases: survey, lint and its gate, recall, bisect, replay, repro, the released "
        "runtime (run), fidelity, nightly guard lane",
        description=(
            "Real sglang releases: a static contract survey of their wheels, the contract lint of releases "
            "or a checkout with a real-code verdict per finding and a gate, recall by mutation, bisection, "
            "reproducers, replays of the kv_indptr crash on their real code, and the released runtime itself "
            "(scheduler, EAGLE worker, DP attention) on this CPU (Triton interpreter)."
        ),
        epilog="exit codes: 0 as asked (every replay conclusive, nothing fails the gate, no fidelity difference); "
        "1 otherwise (lint --fail-on / nightly: findings fail the gate); 2 a usage or environment error "
        "(unknown release, not an sglang checkout, refused bundle, bad or unreviewed triage file, a covered file "
        "that does not parse, a lint or lane that could not run, any exception; run: a release that cannot run "
        "that configuration here)",
    )
    parser.set_defaults(func=_main, kernels=False)
    cache_help = f"wheels, sources and dependency venvs (default $WB_UPSTREAM_CACHE or {default_cache_dir()})"
    parser.add_argument("--cache-dir", type=Path, default=None, help=cache_help)
    sub = parser.add_subparsers(dest="command", required=True)
    sv = sub.add_parser("survey", help="static survey of release wheels (ast only, no import)")
    sv.add_argument(
        "--sglang",
        "--versions",
        nargs="+",
        default=None,
        dest="sglang",
        metavar="X",
        help="release(s) to survey (default 0.5.11-0.5.14 and the newest; --versions is the old spelling, which "
        "the shipped upstream_survey.json's command uses)",
    )
    sv.add_argument("--out", type=Path, default=None, help="write upstream_survey.json, .png and .svg here")
    sv.add_argument("--details", action="store_true", help="also print line-level findings")
    ln = sub.add_parser(
        "lint",
        help="contract lint (ast only): backend spec_info reads x installed "
        "spec inputs; with --replay, each finding triaged by a real replay",
    )
    src = ln.add_mutually_exclusive_group(required=True)
    src.add_argument("--sglang", nargs="+", metavar="X", help="release(s) to lint (cached wheels)")
    src.add_argument(
        "--sglang-src", type=Path, metavar="DIR", help="an sglang checkout (its root or its python/ folder)"
    )
    ln.add_argument(
        "--env-release",
        metavar="X",
        default=None,
        help="release whose environment replays a checkout (default: nearest to its version)",
    )
    ln.add_argument("--replay", action="store_true", help="replay every installed spec input: a verdict per finding")
    ln.add_argument(
        "--end-to-end",
        action="store_true",
        help="with --replay: run the released runtime (DP 2, one idle rank, CPU) for each confirmed finding on a "
        "path it drives (triton / torch_native, IDLE, an EAGLE pass's input); one that raises at the read becomes "
        "'confirmed end to end' (minutes per backend; see docs/real-runtime.md)",
    )
    ln.add_argument("--json", type=Path, default=None, dest="json_out", help="write findings here")
    ln.add_argument("--timeout", type=float, default=900, help="seconds for each replay process")
    ln.add_argument(
        "--fail-on",
        choices=["new", "confirmed", "any"],
        default=None,
        help="exit 1 when such findings exist: new (not covered by the triage file), confirmed, any; "
        "exit 2 on a usage or environment error (see docs/upstream-guard.md)",
    )
    ln.add_argument("--triage", type=Path, default=None, help="triage file (default: the shipped one)")
    ln.add_argument("--sarif", type=Path, default=None, metavar="OUT", help="write SARIF 2.1.0 here")
    tg = sub.add_parser(
        "triage",
        help="a candidate triage file to review (--propose), or a schema-2 triage file converted once (--migrate); "
        "never writes the shipped triage file",
    )
    what = tg.add_mutually_exclusive_group(required=True)
    what.add_argument("--propose", type=Path, metavar="OUT", help="write a candidate triage file here")
    what.add_argument("--migrate", type=Path, metavar="OLD", help="a schema-2 triage file to convert to schema 3")
    tg.add_argument(
        "--findings",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="findings with verdicts (`lint --replay --json` output or the shipped upstream_findings.json)",
    )
    tg.add_argument("--sglang", nargs="+", default=None, metavar="X", help="--propose: lint and replay these instead")
    tg.add_argument("--triage", type=Path, default=None, help="reviewed entries to carry over (default: the shipped)")
    tg.add_argument("--out", type=Path, default=None, help="--migrate: write the converted file here")
    tg.add_argument("--timeout", type=float, default=900, help="seconds for each replay process")
    rc = sub.add_parser(
        "recall",
        help="recall of the lint measured by mutation of real release sources: the robustness mutants (field "
        "removed, guard removed, install moved, with negative controls), or with --oracle mutants of the "
        "independent read sites judged by real code",
    )
    rc.add_argument("--sglang", nargs="+", required=True, metavar="X", help="release(s) whose sources are mutated")
    rc.add_argument("--json", type=Path, default=None, dest="json_out", help="write the per-kind figures here")
    rc.add_argument("--min-recall", type=float, default=0.95, help="exit 1 when a kind's recall is below this")
    rc.add_argument("--min-mutants", type=int, default=50, help="exit 1 when a release yields fewer mutants")
    rc.add_argument(
        "--oracle",
        action="store_true",
        help="judge mutants of the independent read sites by running real code (the replay driver) "
        "instead of the robustness mutants",
    )
    rc.add_argument(
        "--per-kind",
        type=int,
        default=8,
        help="--oracle: runnable mutants replayed per release and kind, sampled by hash (0: all)",
    )
    rc.add_argument("--timeout", type=float, default=600, help="--oracle: seconds for each replay process")
    rc.add_argument(
        "--real-backends",
        action="store_true",
        help="--oracle: sample only mutants whose cases run real backends (triton, torch_native), not traced ones",
    )
    cp = sub.add_parser(
        "corpus",
        help="the lint on a corpus of real upstream crashes, case by case: found / missed / not expressible, "
        "recall on the held-out cases and on the seen ones",
    )
    cp.add_argument("--corpus", type=Path, default=None, help="corpus file (default: the shipped one)")
    cp.add_argument("--case", nargs="+", default=None, metavar="ID", help="only these cases")
    cp.add_argument("--json", type=Path, default=None, dest="json_out", help="write the case results here")
    st = sub.add_parser(
        "sites",
        help="every spec_info / forward_batch read site of a release, enumerated syntactically (not by the lint), "
        "and the share of attention-backend spec_info sites the lint reads",
    )
    st.add_argument("--sglang", nargs="+", required=True, metavar="X", help="release(s) to enumerate")
    st.add_argument("--json", type=Path, default=None, dest="json_out", help="write the sites here")
    fm = sub.add_parser(
        "family",
        help="the idle-batch family beyond the missing attribute: a field None or empty on the IDLE batch "
        "dereferenced (spec_info, forward_batch, runner files), per kind, with replay verdicts",
    )
    fm.add_argument("--sglang", nargs="+", required=True, metavar="X", help="release(s) to analyse")
    fm.add_argument("--replay", action="store_true", help="give each finding a real-code verdict (replay driver)")
    fm.add_argument(
        "--end-to-end",
        action="store_true",
        help="with --replay: run the released runtime (DP 2, rank 1 idle, CPU) for the confirmed findings it drives",
    )
    fm.add_argument("--json", type=Path, default=None, dest="json_out", help="write the findings here")
    bs = sub.add_parser("bisect", help="first bad commit of an sglang git checkout (replay or lint)")
    bs.add_argument("--sglang-src", type=Path, required=True, metavar="REPO", help="an sglang git checkout")
    bs.add_argument("--good", required=True, metavar="REV", help="a commit without the crash (or the finding)")
    bs.add_argument("--bad", required=True, metavar="REV", help="a later commit with it")
    bs.add_argument(
        "--finding",
        default=None,
        metavar="B|MODE|CLASS|ATTR",
        help="bisect on a lint finding (e.g. 'triton|IDLE|EagleDraftExtendInput|kv_indptr') instead of the replay",
    )
    bs.add_argument(
        "--env-release",
        metavar="X",
        default=None,
        help="release whose environment replays each commit (default: nearest to its version)",
    )
    bs.add_argument("--json", type=Path, default=None, dest="json_out", help="write the bisection here")
    bs.add_argument("--timeout", type=float, default=900, help="seconds for each replay process")
    nl = sub.add_parser(
        "nightly",
        help="the network lane: lint + replays on the newest release, its confirmed findings the real "
        "runtime drives run end to end, judged with --fail-on new; "
        "exit 0 pass, 1 findings fail the gate, 2 the lane could not run",
    )
    nl.add_argument("--out", type=Path, required=True, help="writes upstream_lane.json/.html here")
    nl.add_argument("--history", type=Path, default=None, help="JSON-lines history to append to")
    nl.add_argument("--triage", type=Path, default=None, help="triage file (default: the shipped one)")
    nl.add_argument("--sglang", default=None, metavar="X", help="release (default: the newest on PyPI)")
    nl.add_argument("--timeout", type=float, default=900, help="seconds for each replay process")
    rp = sub.add_parser("replay", help="replay the padded-IDLE draft-extend (or a crash bundle) on real sglang")
    rp.add_argument("--sglang", required=True, nargs="+", metavar="X", help="release(s) to replay")
    rp.add_argument(
        "--bundle",
        type=Path,
        default=None,
        metavar="DIR",
        help="a crash-bundle-rank<R>/ folder: replay its batch and compare with the fallback",
    )
    rp.add_argument("--backend", default="triton", choices=["triton"], help="attention backend (the replay's one)")
    rp.add_argument(
        "--graph-runner",
        action="store_true",
        help="instead: DecodeCudaGraphRunner.can_run_graph on a DSpark idle DP rank's draft batch, the runner "
        "built by its real __init__ with a STAND-IN for the graph capture (corpus case "
        "dspark-dp-original-global-num-tokens); a confirmed release is run again with the fix applied. "
        "Exit 0 when every run is confirmed or refuted, 1 else",
    )
    rp.add_argument(
        "--json",
        type=Path,
        default=None,
        dest="json_out",
        help="write the run record (a list when several releases) here",
    )
    rp.add_argument("--rebuild", action="store_true", help="rebuild the release's venv")
    rp.add_argument("--timeout", type=float, default=900, help="seconds for the replay subprocess")
    rr = sub.add_parser(
        "repro",
        help="for every confirmed idle finding of a release: a standalone reproducer, the smallest fix, both run",
    )
    rr.add_argument("--sglang", required=True, metavar="X", help="the release (usually the newest)")
    rr.add_argument("--out", type=Path, required=True, help="one folder per finding, and index.json")
    rr.add_argument("--range", nargs="*", default=None, metavar="X", help="releases to run each reproducer on")
    rr.add_argument("--timeout", type=float, default=900, help="seconds for each replay process")
    _add_run(sub)
    kn = sub.add_parser(
        "kernel",
        help="register (or --remove) a Jupyter kernel on a release's environment, set up as the runtime's ranks, "
        "where a run's crash bundle replays in the release's own code",
    )
    kn.add_argument("--sglang", required=True, metavar="X", help="the release (its cached release environment)")
    kn.add_argument("--sglang-src", type=Path, default=None, metavar="DIR", help="a checkout to put first instead")
    kn.add_argument("--remove", action="store_true", help="remove the kernelspec this command registered")
    _add_explore(sub)
    fd = sub.add_parser(
        "fidelity", help="our contracts vs the releases' (shipped snapshot, or fresh --survey-json/--replay-json)"
    )
    fd.add_argument(
        "--survey-json", type=Path, default=None, metavar="JSON", help="upstream_survey.json from `survey --out`"
    )
    fd.add_argument(
        "--replay-json", type=Path, default=None, metavar="JSON", help="replay records (a list) from `replay --json`"
    )
    fd.add_argument("--json", type=Path, default=None, dest="json_out", help="write the checks here")
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, p in sub.choices.items():  # also after the sub-command (SUPPRESS: a value given before it stays)
        p.add_argument("--cache-dir", type=Path, default=argparse.SUPPRESS, help=cache_help)
        p.description = p.description or helps.get(name)


# The real runtime's choices, written here because workbench.upstream.runtime loads torch;
# tests/cli/test_cli.py checks them against workbench.upstream.runtime.release_run and .fixes.
BACKENDS = ("triton", "torch_native")
ALGORITHMS = ("EAGLE3", "EAGLE", "STANDALONE", "NGRAM")
DP_SIZES = (1, 2, 3)
IDLE_MODES = ("start", "mid")
FIXES = (
    "verify-input",
    "pr-28221",
    "triton-idle-fallback",
    "torch-native-fill-value",
    "eagle-idle-batch",
    "llama-attn-tp",
)


def _add_run(sub) -> None:
    rn = sub.add_parser(
        "run",
        help="the released sglang runtime on CPU (real Scheduler + EAGLE worker, DP attention over gloo, "
        "one idle rank at dp 2): crash or outputs vs HF transformers",
    )
    rn.add_argument(
        "--sglang",
        required=True,
        metavar="X",
        help="release (its release environment; with --sglang-src, the environment the checkout runs on)",
    )
    rn.add_argument("--sglang-src", type=Path, default=None, metavar="DIR", help="an sglang checkout to run instead")
    rn.add_argument(
        "--dp", type=int, default=2, choices=DP_SIZES, help="DP attention ranks (2, 3: ranks >= 1 idle, see --idle)"
    )
    rn.add_argument("--backend", default="triton", choices=BACKENDS, help="the target's attention backend")
    rn.add_argument(
        "--idle",
        default="start",
        choices=IDLE_MODES,
        help="start: ranks >= 1 get no request; mid: every rank gets the prompts, the last 2 new tokens only",
    )
    rn.add_argument(
        "--speculative-algorithm",
        "--algorithm",
        default="EAGLE3",
        choices=ALGORITHMS,
        dest="algorithm",
        help="SGLang's flag; the draft: EAGLE3 and EAGLE heads, STANDALONE the target cut to its first 2 layers, "
        "NGRAM none",
    )
    rn.add_argument(
        "--steps", "--speculative-num-steps", type=int, default=3, dest="steps", help="EAGLE draft steps per round"
    )
    rn.add_argument(
        "--topk", "--speculative-eagle-topk", type=int, default=1, dest="topk", help="branches kept per draft step"
    )
    rn.add_argument(
        "--draft-tokens",
        "--speculative-num-draft-tokens",
        type=int,
        default=4,
        dest="draft_tokens",
        help="tree tokens the target verifies per request, root included",
    )
    rn.add_argument(
        "--fix",
        action="append",
        default=[],
        choices=list(FIXES),
        dest="fixes",
        help="apply a fix inside the rank processes (repeatable)",
    )
    rn.add_argument(
        "--extra-shim",
        action="append",
        default=[],
        type=Path,
        dest="extra_shims",
        metavar="FILE",
        help="for testing the shim guard only: a .py file whose install() each rank calls after the lane's "
        "shims and fixes (repeatable); the guard holds its changes like any other's",
    )
    rn.add_argument("--num-prompts", type=int, default=1, help="use the first N shipped prompts")
    rn.add_argument("--max-new-tokens", type=int, default=16, help="tokens to generate per prompt")
    rn.add_argument("--no-reference", action="store_true", help="skip the HF transformers greedy reference")
    rn.add_argument(
        "--disable-overlap-schedule",
        action="store_true",
        help="SGLang's own flag: the non-overlap event loop (on 0.5.12 it also picks the V1 EAGLE worker)",
    )
    rn.add_argument(
        "--expect",
        choices=("crashed", "ok", "any"),
        default="any",
        help="exit 1 unless the run's status is this (ok: and its outputs equal the reference; any: ok or "
        "crashed) (default: any)",
    )
    rn.add_argument("--timeout", type=float, default=300, help="seconds for the rank processes")
    rn.add_argument("--json", type=Path, default=None, dest="json_out", help="write the run record here")
    rn.add_argument(
        "--bundle-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where a crashing rank writes its crash bundle (default: OUT's folder/<OUT's name>-bundles with "
        "--json, else $WB_BUNDLE_DIR, $WB_LOG_DIR or ~/.cache/eagle-workbench/crash-bundles)",
    )


def _add_explore(sub) -> None:
    ex = sub.add_parser(
        "explore",
        help="the released runtime over every algorithm, attention backend, DP size (idle from the start and "
        "mid-run) and overlap setting: each cell ok, crashed or limit (with the reason)",
    )
    ex.add_argument("--sglang", required=True, metavar="X", help="release (its cached release environment)")
    ex.add_argument(
        "--algorithms", nargs="+", default=None, metavar="ALGORITHM", help="only these speculative algorithms"
    )
    ex.add_argument("--backends", nargs="+", default=None, metavar="BACKEND", help="only these attention backends")
    ex.add_argument("--dps", nargs="+", type=int, default=None, metavar="DP", help="only these DP sizes")
    ex.add_argument("--max-new-tokens", type=int, default=8, help="tokens each prompt generates (default 8)")
    ex.add_argument("--timeout", type=float, default=240, help="seconds for one cell's rank processes")
    ex.add_argument("--json", type=Path, default=None, dest="json_out", help="write the exploration here")
    ex.add_argument("--html", type=Path, default=None, dest="html_out", help="write its HTML table here")


def _explore(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    """Exit 0: every cell's verdict is ok, crashed or limit; 1: a cell failed (outputs differ from HF,
    a timeout, an error after the requests); 2: bad input (unknown release, backend, algorithm or dp)."""
    from workbench.upstream.runtime.explore import explore, validate
    from workbench.views.runtime_explore import cell_progress, explore_html, explore_table

    validate(ctx, args.sglang, args.algorithms, args.backends, args.dps)  # bad input: exit 2 before the bar
    command = "workbench " + " ".join(getattr(args, "argv", None) or sys.argv[1:])
    with cell_progress(f"explore sglang {args.sglang}") as (progress, on_cells, log):
        result = explore(
            ctx.replace(log=log),
            args.sglang,
            args.algorithms,
            args.backends,
            args.dps,
            max_new_tokens=args.max_new_tokens,
            timeout_s=args.timeout,
            progress=progress,
            command=command,
            on_cells=on_cells,
        )
    echo(repr(explore_table(result)))
    echo(f"{result['counts']} in {result['wall_s']} s")
    _write(args.json_out, result)
    if args.html_out:
        args.html_out.write_text(explore_html(result))
    return 1 if result["counts"].get("failed") else 0


def _run(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    """Exit 0: ended ok (outputs equal to the reference) or crashed, as --expect says if given; 1: --expect
    not met, outputs that differ from the reference, or a timeout; 2: bad input, or the release cannot run
    this configuration here (the record's error, or its limits: a known upstream limit the run met)."""
    from workbench.upstream.runtime.release_run import run_runtime

    rec = run_runtime(
        ctx,
        args.sglang,
        args.dp,
        args.backend,
        args.fixes,
        args.sglang_src,
        args.steps,
        args.topk,
        args.draft_tokens,
        args.num_prompts,
        args.max_new_tokens,
        not args.no_reference,
        args.disable_overlap_schedule,
        args.timeout,
        args.extra_shims,
        bundle_dir=args.bundle_dir or (args.json_out and args.json_out.parent / f"{args.json_out.stem}-bundles"),
        idle=args.idle,
        algorithm=args.algorithm,
    )
    if rec["crash"]:
        echo(rec["crash"]["traceback"].rstrip())
        echo(f"crash bundle: {rec['crash'].get('bundle') or rec['crash'].get('bundle_error')}")
    if rec.get("error"):
        echo(f"error at {rec['error']['stage']}: {rec['error']['message']}")
    t = rec["timings"]
    echo(
        f"status {rec['status']}; wall {t.get('wall_s')} s (environment {t.get('env_s')} s, "
        f"ranks {t.get('ranks_s')} s, reference {t.get('reference_s')} s); "
        f"processes left: {rec['processes'].get('left_running')}"
    )
    _write(args.json_out, rec)
    for note in rec.get("notes", []):
        echo(f"note: {note}")
    if rec["status"] == "error" or rec.get("limits"):
        return 2
    if rec["status"] == "ok" and (rec.get("reference") or {}).get("equal") is False:
        echo("the outputs differ from HF transformers' greedy tokens")
        return 1
    if args.expect != "any":
        met = rec["status"] == args.expect and (
            args.expect != "ok" or not rec["reference"] or rec["reference"]["equal"]
        )
        return 0 if met else 1
    return 0 if rec["status"] in ("ok", "crashed") else 1


def _kernel(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    """Exit 0: registered (or removed); 2: a bad release or folder, an environment that cannot be built,
    or no workbench kernelspec to remove."""
    from workbench.upstream.runtime.kernel import KernelError, register, remove
    from workbench.upstream.sources.envs import EnvBuildError

    try:
        if args.remove:
            echo(f"removed {remove(args.sglang, args.sglang_src)}")
            return 0
        info = register(ctx, args.sglang, args.sglang_src)
    except (KernelError, EnvBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    echo(f"kernel {info['name']} at {info['path']}: {info['python']}, sources {info['src_root']}")
    if info["added"]:
        echo(f"added to that environment: {', '.join(info['added'])}")
    return 0


def _fidelity(args: argparse.Namespace) -> int:  # imports on use (module docstring)
    from workbench.upstream.fidelity import fidelity, format_fidelity, load_snapshot, snapshot_from

    snap = load_snapshot()
    if args.survey_json or args.replay_json:
        fresh = snapshot_from(
            json.loads(args.survey_json.read_text()) if args.survey_json else {"releases": {}},
            json.loads(args.replay_json.read_text()) if args.replay_json else [],
        )
        snap = {"survey": fresh["survey"] or snap["survey"], "replay": fresh["replay"] or snap["replay"]}
    result = fidelity(snap)
    echo(format_fidelity(result))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    compared = any(c["equal"] is not None for c in result["checks"])  # nothing compared is no pass
    return 1 if result["differences"] or not compared else 0


def _survey(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.static.survey import format_details, format_table, survey
    from workbench.views.plots.survey_plots import plot_survey

    start = time.perf_counter()
    result = survey(ctx, args.sglang)
    echo("")
    echo(format_table(result))
    if args.details:
        echo("")
        echo(format_details(result))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        json_path = args.out / "upstream_survey.json"
        json_path.write_text(json.dumps(result, indent=1))
        paths = [json_path, *plot_survey(result, args.out)]
        echo("\nwrote " + ", ".join(str(p) for p in paths))
    echo(f"survey of {len(result['versions'])} releases took {time.perf_counter() - start:.1f} s")
    return 0


def _replay(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.replay.records import seed_record
    from workbench.upstream.sources.releases import check_versions

    versions = check_versions(ctx, args.sglang)
    records = []
    for version in versions:
        rec = seed_record(ctx, version, backend=args.backend)
        records.append(rec)
        t = rec["timings"]
        echo(
            f"sglang {version}: {rec['status']}  install {t['install_s']:.1f} s "
            f"({'cached' if t['cached'] else 'uncached'}), run {t['run_s']:.1f} s"
        )
        if rec["crash"]:
            echo(rec["crash"]["traceback"].rstrip())
        if rec.get("error"):
            echo(
                f"error at {rec['error']['stage']}: {rec['error']['message']}"
                + (f" (missing: {rec['error']['missing']})" if rec["error"]["missing"] else "")
            )
        for note in rec["notes"]:
            echo(f"note: {note}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(records[0] if len(records) == 1 else records, indent=1))
        echo(f"wrote {args.json_out}")
    return 1 if any(r["status"] not in ("ok", "crashed") for r in records) else 0


def _replay_graph_runner(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use
    from workbench.upstream.replay.runner_decisions import format_decision, runner_decision
    from workbench.upstream.sources.releases import check_versions

    records = []
    for version in check_versions(ctx, args.sglang):
        records.append(runner_decision(ctx, version))
        if records[-1]["verdict"] == "confirmed":
            records.append(runner_decision(ctx, version, fix=True))
    for rec in records:
        echo(format_decision(rec))
    _write(args.json_out, {"command": "workbench " + " ".join(args.argv), "records": records})
    return 0 if all(r["verdict"] in ("confirmed", "refuted") for r in records) else 1


def _write(path: Path | None, data: object) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
        echo(f"wrote {path}")


def _lint(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.run.provenance import workbench_commit
    from workbench.upstream.gate import (
        EXIT_ERROR,
        EXIT_FAIL,
        EXIT_PASS,
        judge,
        live_lines,
        live_rows,
        load_triage,
        not_filed,
        not_filed_lines,
        ran_problems,
    )
    from workbench.upstream.guard import check, check_json
    from workbench.upstream.sarif import to_sarif
    from workbench.upstream.sources.releases import latest_release
    from workbench.upstream.static.lint import format_findings

    triage = load_triage(args.triage) if args.fail_on else {}
    result = check(ctx, args.sglang, args.sglang_src, replay=args.replay, end_to_end=args.end_to_end)
    problems = ran_problems(result, args.replay)
    newest = latest_release(ctx) if args.fail_on else None
    failing = judge(result["findings"], triage, args.fail_on, newest) if args.fail_on else []
    unfiled = not_filed(result["findings"], triage, newest) if args.fail_on == "new" else []
    live = live_rows(result["findings"], triage, newest) if args.fail_on else []
    result.update(
        problems=problems,
        fail_on=args.fail_on,
        failing=[{"key": x.finding.key, "gate": x.gate} for x in failing],
        not_filed=unfiled,
        live=live,
    )
    echo("")
    echo(format_findings(result["findings"]))
    for line in live_lines(live) + not_filed_lines(unfiled):
        echo(line)
    for x in failing:
        echo(f"FAIL {x.finding.key} at {x.finding.read_at}: {x.gate}")
    for p in problems:
        echo(f"ERROR {p}")
    _write(args.json_out, check_json(result))
    if args.sarif:
        roots = {r["source"]: (r["base"], r["prefix"]) for r in result["results"]}
        _write(args.sarif, to_sarif(result, roots, failing, workbench_commit() or "unknown"))
    if problems:
        return EXIT_ERROR
    return EXIT_FAIL if failing else EXIT_PASS


def _triage(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    """Exit 0 written; 2 bad input (the shipped triage file as OUT, no findings, a wrong schema)."""
    import datetime as _dt

    from workbench.run.provenance import workbench_commit
    from workbench.run.serialise import RecordError
    from workbench.upstream.gate import TRIAGE_FILE, GateError, load_triage, migrate_triage, propose_triage
    from workbench.upstream.static.finding import read_findings

    out = args.propose or args.out
    if out is None:
        raise GateError("--migrate needs --out NEW")
    if Path(out).resolve() == TRIAGE_FILE.resolve():
        raise GateError(f"{out} is the shipped triage file: the run it judges never writes it; write a candidate")
    command = "workbench " + " ".join(args.argv)
    at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    if args.sglang and args.findings:
        raise GateError("give --findings or --sglang, not both")
    if args.sglang:
        from workbench.upstream.guard import check

        result = check(ctx, args.sglang, replay=True)
        findings, sources = result["findings"], result["sources"]
    elif args.findings:
        findings, sources = [], []
        for path in args.findings:
            try:
                doc = json.loads(Path(path).read_text())
            except (OSError, ValueError) as exc:
                raise GateError(f"--findings {path}: {exc}") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("findings"), list):
                raise GateError(f"--findings {path}: no 'findings' list (`lint --replay --json` writes one)")
            try:
                findings += read_findings(doc["findings"], f"--findings {path}: findings")
            except RecordError as exc:
                raise GateError(str(exc)) from None
            sources += doc.get("sources") or []
    else:
        raise GateError("--findings JSON ... or --sglang X ... is needed")
    if args.migrate:
        try:
            old = json.loads(Path(args.migrate).read_text())
        except (OSError, ValueError) as exc:
            raise GateError(f"--migrate {args.migrate}: {exc}") from None
        doc = migrate_triage(old, findings, command, workbench_commit(), at)
    else:
        previous = load_triage(args.triage)
        doc = propose_triage(findings, sources, previous, command, workbench_commit(), at)
    todo = sum(1 for e in doc["entries"].values() if not e.get("status"))
    _write(out, doc)
    echo(f"{len(doc['entries'])} entries, {todo} to review (status null), {len(doc['dropped'])} dropped (stale)")
    return 0


def _oracle_recall(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.replay.oracle import format_oracle, oracle_recall

    start = time.perf_counter()
    per_kind = None if args.per_kind == 0 else args.per_kind
    if per_kind is not None and per_kind < 0:
        echo(f"error: --per-kind {args.per_kind}: give 0 (all) or a positive number")
        return 2
    result = oracle_recall(
        ctx.replace(timeout_s=args.timeout),
        args.sglang,
        "workbench " + " ".join(args.argv),
        per_kind,
        args.json_out,
        real_only=args.real_backends,
    )
    result["run_s"] = round(time.perf_counter() - start, 1)
    echo("")
    echo(format_oracle(result))
    for v, r in result["releases"].items():
        for kind, k in r["kinds"].items():
            for name in k["missed"]:
                echo(f"MISSED {v} {kind}: {name}")
        if r["unparsed"]:
            echo(f"UNPARSED {v}: {'; '.join(r['unparsed'])}")
    _write(args.json_out, result)
    echo(f"oracle recall over {len(result['releases'])} release(s) took {result['run_s']} s ({result['sampling']})")
    broken = [v for v, r in result["releases"].items() if r["unparsed"] or not r["control_ok"]]
    for v in broken:
        echo(f"ERROR {v}: a covered file does not parse, or the control replay of the release did not run")
    if broken:
        return 2
    low = [
        f"{v} {kind}: recall {k['recall']} on {k['confirmed']} confirmed mutants"
        for v, r in result["releases"].items()
        for kind, k in r["kinds"].items()
        if k["confirmed"] >= 10 and k["recall"] < 0.9
    ]
    for line in low:
        echo(f"FAIL {line}")
    return 1 if low else 0


def _recall(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.static.recall import format_recall, recall

    if args.oracle:
        return _oracle_recall(args, ctx)
    start = time.perf_counter()
    result = recall(ctx, args.sglang, "workbench " + " ".join(args.argv))
    result["run_s"] = round(time.perf_counter() - start, 1)
    echo("")
    echo(format_recall(result))
    for v, r in result["releases"].items():
        for m in r["misses"]:
            echo(f"MISSED {v} {m['kind']}: {m['name']}")
        for name in r["dirty_controls"]:
            echo(f"DIRTY CONTROL {v}: {name}")
    _write(args.json_out, result)
    echo(f"recall over {len(result['releases'])} release(s) took {result['run_s']} s")
    low = [
        f"{v} {kind}: recall {k['recall']}"
        for v, r in result["releases"].items()
        for kind, k in r["kinds"].items()
        if k["recall"] is not None and k["recall"] < args.min_recall
    ]
    low += [f"{v}: a dirty control" for v, r in result["releases"].items() if r["dirty_controls"]]
    low += [f"{v}: {r['mutants']} mutants" for v, r in result["releases"].items() if r["mutants"] < args.min_mutants]
    for line in low:
        echo(f"FAIL {line}")
    return 1 if low else 0


def _corpus(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.static.corpus import format_corpus, load_corpus, run_corpus

    result = run_corpus(ctx, load_corpus(args.corpus), args.case)
    result["command"] = "workbench " + " ".join(args.argv)
    echo("")
    echo(format_corpus(result))
    for r in result["cases"]:
        for v, pr in r["per_release"].items():
            if pr.get("at_crash_site"):
                echo(f"{r['id']} {v}: the lint reports {', '.join(pr['at_crash_site'])} in the crashing function")
        if r.get("still_reported_when_fixed"):
            echo(f"{r['id']}: still reported on the fixed release(s) {', '.join(r['still_reported_when_fixed'])}")
    _write(args.json_out, result)
    return 0


def _sites(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.sources.releases import check_versions
    from workbench.upstream.sources.trees import release_tree
    from workbench.upstream.static.lint import analyse
    from workbench.upstream.static.sites import enumerate_sites, lint_coverage, summary

    out = {}
    for v in check_versions(ctx, args.sglang):
        tree = release_tree(ctx, v)
        res = enumerate_sites(tree)
        res["summary"], res["lint_coverage"] = summary(res), lint_coverage(res, analyse(tree, paths=False))
        out[v] = res
        cov = res["lint_coverage"]
        echo(f"sglang {v}: {len(res['sites'])} read sites")
        for key, n in res["summary"].items():
            echo(f"  {key}: {n}")
        echo(
            f"  unguarded spec_info sites in layers/attention/: {cov['sites']}, "
            f"{cov['in_lint']} of them among the lint's reads ({cov['share']})"
        )
        for u in res["unparsed"]:
            echo(f"ERROR {v}: {u} does not parse")
    _write(args.json_out, {"command": "workbench " + " ".join(args.argv), "releases": out})
    return 2 if any(r["unparsed"] for r in out.values()) else 0


def _family(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.sources.releases import check_versions
    from workbench.upstream.sources.trees import release_tree
    from workbench.upstream.static.family import analyse_family, count_by_kind, format_family

    out = {}
    for v in check_versions(ctx, args.sglang):
        tree = release_tree(ctx, v)
        res = analyse_family(tree)
        if args.replay:
            from workbench.upstream.replay.family_verdicts import family_verdicts

            res["findings"], res["replay"] = family_verdicts(ctx, tree, res)
            if args.end_to_end:
                from workbench.upstream.replay.family_verdicts import family_end_to_end

                res["findings"], res["end_to_end"] = family_end_to_end(ctx, tree, res["findings"])
        res["counts"] = count_by_kind(res["findings"])
        out[v] = res
        echo(f"sglang {v}: " + ", ".join(f"{k} {n}" for k, n in res["counts"].items()))
        echo(format_family(res["findings"]))
        for u in res["unparsed"]:
            echo(f"ERROR {v}: {u} does not parse")
    _write(args.json_out, {"command": "workbench " + " ".join(args.argv), "releases": out})
    failed = any(
        r["unparsed"] or any((r.get(k) or {}).get("status") not in (None, "ok") for k in ("replay", "end_to_end"))
        for r in out.values()
    )
    return 2 if failed else 0


def _bisect(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.bisect import bisect

    result = bisect(ctx, args.sglang_src, args.good, args.bad, args.finding)
    first = result["first_bad"]
    echo(f"first bad commit: {first['sha']} {first['subject']}")
    echo(
        f"{result['candidates']} candidate commits, {result['steps']} tried "
        f"({result['replays']} replays): " + ", ".join(t["sha"][:10] for t in result["tried"])
    )
    _write(args.json_out, result)
    return 0


def _replay_bundle(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.replay.bundles import replay_bundle

    result = replay_bundle(ctx, args.bundle, args.sglang)
    echo(f"reference (from the bundle): {result['reference']}")
    for v, r in result["releases"].items():
        echo(
            f"sglang {v}: {r['status']}  "
            + (r.get("exception") or f"equal to reference: {r.get('equal_to_reference')}")
        )
    _write(args.json_out, result)
    return 0 if all(_bundle_conclusive(r) for r in result["releases"].values()) else 1


def _bundle_conclusive(r: dict) -> bool:
    """A release's replay of a bundle agrees with it: the bundle's own exception, or the reference metadata."""
    if r["status"] == "crashed":
        return bool(r.get("same_exception_as_bundle"))
    return r["status"] == "ok" and bool(r.get("equal_to_reference"))


def _nightly(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.gate import GateError
    from workbench.upstream.lane import EXIT, LANE_HTML, history_line, read_history, run_lane
    from workbench.upstream.sources.releases import check_versions
    from workbench.views.guard_tables import lane_html

    version = check_versions(ctx, [args.sglang])[0] if args.sglang else None
    night = run_lane(ctx, args.out, args.history, args.triage, version)
    try:
        nights = read_history(args.history) if args.history is not None else [history_line(night)]
    except GateError:  # already the night's problem (run_lane reads the history first)
        nights = [history_line(night)]
    (args.out / LANE_HTML).write_text(lane_html(night, nights))
    return EXIT[night["verdict"]]


def _repro(args: argparse.Namespace, ctx: UpstreamContext) -> int:  # imports on use (module docstring)
    from workbench.upstream.replay.reproducers import reproducers

    index = reproducers(ctx, args.sglang, args.out, args.range)
    for key, r in index["reproducers"].items():
        echo(f"{key}: reproduced {r['reproduced']}, fixed {r['fixed']}, raises on {', '.join(r['raises'])}")
    echo(f"wrote {args.out / 'index.json'}")
    return 0 if all(r["reproduced"] and r["fixed"] for r in index["reproducers"].values()) else 1


COMMANDS = {
    "survey": _survey,
    "lint": _lint,
    "nightly": _nightly,
    "bisect": _bisect,
    "recall": _recall,
    "corpus": _corpus,
    "sites": _sites,
    "triage": _triage,
    "family": _family,
    "repro": _repro,
    "run": _run,
    "kernel": _kernel,
    "explore": _explore,
}


def _main(args: argparse.Namespace) -> int:
    """Run the parsed ``workbench upstream`` command; returns the exit code: 0 pass, 1 findings fail the
    gate (or a replay was not conclusive), 2 a usage or environment error (a bad version, source folder or
    triage file; a lint or lane that could not run; a release that cannot run that configuration here)."""
    if getattr(args, "end_to_end", False) and not args.replay:
        print(
            "workbench upstream lint: error: --end-to-end needs --replay (it upgrades the findings a replay confirmed)",
            file=sys.stderr,
            flush=True,
        )
        return 2
    ctx = UpstreamContext(
        cache_dir=args.cache_dir or default_cache_dir(),
        log=echo,
        timeout_s=getattr(args, "timeout", None) or 900.0,
        rebuild=getattr(args, "rebuild", False),
        env_release=getattr(args, "env_release", None),
    )
    try:
        if args.command == "fidelity":
            return _fidelity(args)
        if args.command in COMMANDS:
            return COMMANDS[args.command](args, ctx)
        if args.bundle is not None:
            return _replay_bundle(args, ctx)
        if args.graph_runner:
            return _replay_graph_runner(args, ctx)
        return _replay(args, ctx)
    except Exception as exc:  # noqa: BLE001 - any failure: bad input or could not run (exit 2), never 1 or a pass
        if isinstance(exc, _input_errors()):
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        traceback.print_exc(file=sys.stderr)
        print(f"error: could not run: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2


def _input_errors() -> tuple[type[Exception], ...]:  # imports on use: their modules load torch
    """The errors that name a bad value (printed without a traceback), imported when one is raised."""
    from workbench.debug.bundle import BundleError
    from workbench.upstream.bisect import BisectError
    from workbench.upstream.gate import GateError
    from workbench.upstream.runtime.release_run import RuntimeConfigError
    from workbench.upstream.sources.releases import ReleaseError
    from workbench.upstream.sources.trees import SourceError
    from workbench.upstream.static.corpus import CorpusError

    return ReleaseError, SourceError, BisectError, BundleError, GateError, RuntimeConfigError, CorpusError
