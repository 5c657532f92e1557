"""``workbench upstream survey|replay|lint|bisect|fidelity|nightly``: the real SGLang releases.

Each subcommand imports what it runs when it runs (the replays and the fidelity check load torch,
the survey plot matplotlib), so ``--help`` and a usage error answer at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from workbench.debug.bundle import BundleError
from workbench.upstream.bisect import BisectError
from workbench.upstream.lint import SourceError
from workbench.upstream.releases import ReleaseError, check_version, default_cache_dir, echo, known_releases


def register(top: argparse._SubParsersAction) -> None:
    """Add ``upstream`` and its sub-commands; ``--cache-dir`` is taken before or after the sub-command."""
    parser = top.add_parser(
        "upstream",
        help="the real SGLang releases: survey, lint, bisect, replay, fidelity, nightly guard lane",
        description=(
            "Real sglang releases: a static contract survey of their wheels, the contract lint of releases "
            "or a checkout, bisection, and replays of the kv_indptr crash on their real code (CPU, Triton "
            "interpreter)."
        ),
        epilog="exit codes: 0 as asked (every replay conclusive, no untriaged finding, no fidelity difference); "
        "1 otherwise; 2 a usage error before anything runs (unknown release, not an sglang checkout, refused bundle)",
    )
    parser.set_defaults(func=_main, kernels=False)
    cache_help = f"wheels, sources and dependency venvs (default $WB_UPSTREAM_CACHE or {default_cache_dir()})"
    parser.add_argument("--cache-dir", type=Path, default=None, help=cache_help)
    sub = parser.add_subparsers(dest="command", required=True)
    sv = sub.add_parser("survey", help="static survey of release wheels (ast only, no import)")
    sv.add_argument(
        "--versions", nargs="+", metavar="X", help="releases to survey (default 0.5.11-0.5.14 and the newest)"
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
    ln.add_argument("--replay", action="store_true", help="replay every installed spec input and triage")
    ln.add_argument("--json", type=Path, default=None, dest="json_out", help="write findings here")
    ln.add_argument("--timeout", type=float, default=900, help="seconds for each replay process")
    bs = sub.add_parser("bisect", help="first bad commit of an sglang git checkout (replay or lint)")
    bs.add_argument("--sglang-src", type=Path, required=True, metavar="REPO")
    bs.add_argument("--good", required=True, metavar="REV")
    bs.add_argument("--bad", required=True, metavar="REV")
    bs.add_argument(
        "--finding",
        default=None,
        metavar="B|MODE|CLASS|ATTR",
        help="bisect on a lint finding (e.g. 'triton|IDLE|EagleDraftExtendInput|kv_indptr') instead of the replay",
    )
    bs.add_argument("--env-release", metavar="X", default=None)
    bs.add_argument("--json", type=Path, default=None, dest="json_out")
    bs.add_argument("--timeout", type=float, default=900)
    nl = sub.add_parser(
        "nightly",
        help="the network lane: lint + replays on the newest release, "
        "failing on findings the triage file does not list",
    )
    nl.add_argument("--out", type=Path, required=True, help="writes upstream_lane.json/.html here")
    nl.add_argument("--history", type=Path, default=None, help="JSON-lines history to append to")
    nl.add_argument("--triage", type=Path, default=None, help="triage file (default: the shipped one)")
    nl.add_argument("--sglang", default=None, metavar="X", help="release (default: the newest on PyPI)")
    rp = sub.add_parser("replay", help="replay the padded-IDLE draft-extend (or a crash bundle) on real sglang")
    rp.add_argument("--sglang", required=True, nargs="+", metavar="X", help="release(s) to replay")
    rp.add_argument(
        "--bundle",
        type=Path,
        default=None,
        metavar="DIR",
        help="a crash-bundle-rank<R>/ folder: replay its batch and compare with the fallback",
    )
    rp.add_argument("--backend", default="triton", choices=["triton"])
    rp.add_argument(
        "--json",
        type=Path,
        default=None,
        dest="json_out",
        help="write the run record (a list when several releases) here",
    )
    rp.add_argument("--rebuild", action="store_true", help="rebuild the release's venv")
    rp.add_argument("--timeout", type=float, default=900, help="seconds for the replay subprocess")
    fd = sub.add_parser(
        "fidelity", help="our contracts vs the releases' (shipped snapshot, or fresh --survey/--replay JSON)"
    )
    fd.add_argument("--survey", type=Path, default=None, help="upstream_survey.json from `survey --out`")
    fd.add_argument("--replay", type=Path, default=None, help="replay records JSON (a list) from `replay --json`")
    fd.add_argument("--json", type=Path, default=None, dest="json_out")
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, p in sub.choices.items():  # also after the sub-command (SUPPRESS: a value given before it stays)
        p.add_argument("--cache-dir", type=Path, default=argparse.SUPPRESS, help=cache_help)
        p.description = p.description or helps.get(name)


def _fidelity(args: argparse.Namespace) -> int:  # imports on use (module docstring)
    from workbench.upstream.fidelity import fidelity, format_fidelity, load_snapshot, snapshot_from

    snap = load_snapshot()
    if args.survey or args.replay:
        fresh = snapshot_from(
            json.loads(args.survey.read_text()) if args.survey else {"releases": {}},
            json.loads(args.replay.read_text()) if args.replay else [],
        )
        snap = {"survey": fresh["survey"] or snap["survey"], "replay": fresh["replay"] or snap["replay"]}
    result = fidelity(snap)
    echo(format_fidelity(result))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    compared = any(c["equal"] is not None for c in result["checks"])  # nothing compared is no pass
    return 1 if result["differences"] or not compared else 0


def _check_versions(versions: list[str], cache_dir: Path) -> list[str]:
    known = known_releases(cache_dir)
    return [check_version(v, known) for v in versions]


def _survey(args: argparse.Namespace, cache_dir: Path) -> int:  # imports on use (module docstring)
    from workbench.upstream.contract_survey import format_details, format_table, survey
    from workbench.views.plots.survey import plot_survey

    versions = _check_versions(args.versions, cache_dir) if args.versions else None
    start = time.perf_counter()
    result = survey(versions, cache_dir, log=echo)
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


def _replay(args: argparse.Namespace, cache_dir: Path) -> int:  # imports on use (module docstring)
    from workbench.upstream.release_replay import replay

    versions = _check_versions(args.sglang, cache_dir)
    records = []
    for version in versions:
        rec = replay(version, cache_dir, backend=args.backend, log=echo, timeout_s=args.timeout, rebuild=args.rebuild)
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


def _write(path: Path | None, data: object) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1))
        echo(f"wrote {path}")


def _lint(args: argparse.Namespace, cache_dir: Path) -> int:  # imports on use (module docstring)
    from workbench.upstream.guard import check
    from workbench.upstream.lint import format_findings

    versions = _check_versions(args.sglang, cache_dir) if args.sglang else None
    result = check(
        versions,
        args.sglang_src,
        args.env_release,
        replay=args.replay,
        cache_dir=cache_dir,
        log=echo,
        timeout_s=args.timeout,
    )
    echo("")
    echo(format_findings(result["findings"]))
    _write(args.json_out, result)
    return 0


def _bisect(args: argparse.Namespace, cache_dir: Path) -> int:  # imports on use (module docstring)
    from workbench.upstream.bisect import bisect

    result = bisect(
        args.sglang_src,
        args.good,
        args.bad,
        args.finding,
        args.env_release,
        cache_dir,
        log=echo,
        timeout_s=args.timeout,
    )
    first = result["first_bad"]
    echo(f"first bad commit: {first['sha']} {first['subject']}")
    echo(
        f"{result['candidates']} candidate commits, {result['steps']} tried "
        f"({result['replays']} replays): " + ", ".join(t["sha"][:10] for t in result["tried"])
    )
    _write(args.json_out, result)
    return 0


def _replay_bundle(args: argparse.Namespace, cache_dir: Path) -> int:  # imports on use (module docstring)
    from workbench.upstream.bundle_replay import replay_bundle

    result = replay_bundle(
        args.bundle, _check_versions(args.sglang, cache_dir), cache_dir, log=echo, timeout_s=args.timeout
    )
    echo(f"reference (from the bundle): {result['reference']}")
    for v, r in result["releases"].items():
        echo(
            f"sglang {v}: {r['outcome']}  "
            + (r.get("exception") or f"equal to reference: {r.get('equal_to_reference')}")
        )
    _write(args.json_out, result)
    return 0 if all(_bundle_conclusive(r) for r in result["releases"].values()) else 1


def _bundle_conclusive(r: dict) -> bool:
    """A release's replay of a bundle agrees with it: the bundle's own exception, or the reference metadata."""
    if r["outcome"] == "crashed":
        return bool(r.get("same_exception_as_bundle"))
    return r["outcome"] == "ok" and bool(r.get("equal_to_reference"))


def _main(args: argparse.Namespace) -> int:
    """Run the parsed ``workbench upstream`` command; returns the exit code (2 for a bad version string)."""
    cache_dir = args.cache_dir or default_cache_dir()
    try:
        if args.command == "survey":
            return _survey(args, cache_dir)
        if args.command == "fidelity":
            return _fidelity(args)
        if args.command == "lint":
            return _lint(args, cache_dir)
        if args.command == "nightly":
            # imports on use (module docstring)
            from workbench.upstream.lane import run_lane
            from workbench.views.upstream import lane_html

            night = run_lane(
                args.out,
                args.history,
                args.triage,
                _check_versions([args.sglang], cache_dir)[0] if args.sglang else None,
                cache_dir,
            )
            (args.out / "upstream_lane.html").write_text(lane_html(night))
            return 1 if night["verdict"] == "fail" else 0
        if args.command == "bisect":
            return _bisect(args, cache_dir)
        if args.bundle is not None:
            return _replay_bundle(args, cache_dir)
        return _replay(args, cache_dir)
    except (ReleaseError, SourceError, BisectError, BundleError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
