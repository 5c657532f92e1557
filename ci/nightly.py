"""Nightly runner: ``python -m workbench_ci.nightly --matrix ci/matrix.yaml --out artifacts/nightly``.

Runs every matrix cell's notebook through papermill (``min(cores, cells)`` at once), judges each
against its expectation, checks output parity and accept length against the history, writes
executed notebooks (``.ipynb`` and HTML), ``summary.json``, ``report.html``, ``junit.xml`` and
``summary.md`` into ``--out``, appends the night to the
history database and exits 1 on any unexpected cell (2 on a usage or matrix error). SIGTERM ends the
running notebooks with what they started (kernels, DP ranks) and exits 143.

``--shard i/N`` runs one shard and writes only its partial ``results.json``; ``--merge DIR...``
merges shard folders into one report, history entry and exit status. ``--lane DIR`` /
``--lane-history FILE``: the upstream guard lane's latest result, shown in the report (ci/upstream_lane.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from workbench.run.provenance import workbench_commit
from workbench.run.serialise import from_dict, to_dict
from workbench.run.supervisor import Terminated, sigterm_exits
from workbench_ci import expect
from workbench_ci.cells import default_jobs, prepare_all, run_cells, thread_env, usable_cores
from workbench_ci.history import History
from workbench_ci.kernelspec import KernelSpecError
from workbench_ci.matrix import MatrixError, load_matrix, parse_shard
from workbench_ci.nightly_report import write_report
from workbench_ci.publish import export_html
from workbench_ci.results import CellResult
from workbench_ci.upstream_lane import lane_problems, latest_lane

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "results.json"
SCHEMA = "ci.nightly-results/2"  # /2: cells as ci.results.CellResult, an execution's ending in `status`
OWNED = (
    "notebooks",
    "records",
    "logs",
    "jobs",
    "plots",
    RESULTS,
    "summary.json",
    "report.html",
    "junit.xml",
    "summary.md",
)
COPIED = ("notebooks", "records", "logs")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _environment() -> dict:
    return {
        "python": platform.python_version(),
        "torch": importlib.metadata.version("torch"),
        "host": platform.node(),
        "cpu": platform.machine(),
        "cores": usable_cores(),
        "git": workbench_commit(),
    }


def _clean(out: Path) -> None:
    """Remove what an earlier night left in ``out`` (only the runner's own files; the history stays)."""
    for name in OWNED:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _run(args: argparse.Namespace) -> int:
    t0, started = time.perf_counter(), _now()
    matrix = load_matrix(args.matrix)
    cells = matrix.cells
    shard = None
    if args.shard:
        i, n = parse_shard(args.shard)
        cells, shard = matrix.shard(i, n), f"{i}/{n}"
    if args.only:
        cells = [c for c in cells if any(s in c.name for s in args.only)]
    if not cells:
        raise MatrixError(f"no cells to run (shard {shard}, --only {args.only})")
    out = Path(args.out)
    extra = {"model_dir": str(Path(args.model_dir).resolve())} if args.model_dir else {}
    queue = prepare_all(cells, ROOT, out.resolve(), extra)  # refuses before anything runs or is removed
    out.mkdir(parents=True, exist_ok=True)
    _clean(out)
    jobs = args.jobs or default_jobs(len(cells))
    results = run_cells(queue, matrix, ROOT, out.resolve(), jobs)
    export_html(out, results)
    doc = {
        "schema": SCHEMA,
        "matrix": matrix.path,
        "shard": shard,
        "started_at": started,
        "wall_s": time.perf_counter() - t0,
        "environment": {
            **_environment(),
            "notebooks_at_once": jobs,
            "threads_each": thread_env(jobs)["OMP_NUM_THREADS"],
        },
        "settings": {"accept_length_drop": matrix.accept_length_drop, "checks": matrix.checks},
        "cells": [to_dict(r) for r in results],
    }
    (out / RESULTS).write_text(json.dumps(doc, indent=1, default=str))
    if shard:
        bad = [r for r in results if r.verdict != "expected"]
        for r in bad:
            print(f"UNEXPECTED {r.name}: {'; '.join(r.reasons)}", file=sys.stderr)
        print(
            f"shard {shard}: {len(results) - len(bad)}/{len(results)} cells as expected; partial results in "
            f"{(out / RESULTS).resolve()}"
        )
        return 1 if bad else 0
    return finalize(out, [doc], args.history or out / "history.sqlite", args.night, t0, lane=_lane_args(args))


def _merge(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if all(Path(d).resolve() != out.resolve() for d in args.merge):
        _clean(out)
    docs, missing = [], []
    for d in map(Path, args.merge):
        f = d / RESULTS
        if not f.is_file():
            missing.append(str(d))
            continue
        doc = json.loads(f.read_text())
        if doc.get("schema") != SCHEMA:
            raise MatrixError(f"--merge: {f} has schema {doc.get('schema')!r}; valid: {SCHEMA!r} (rerun that shard)")
        docs.append(doc)
        if d.resolve() != out.resolve():
            for name in COPIED:
                if (d / name).is_dir():
                    shutil.copytree(d / name, out / name, dirs_exist_ok=True)
    if not docs:
        raise MatrixError(f"--merge: no {RESULTS} in {', '.join(args.merge)}")
    return finalize(out, docs, args.history or out / "history.sqlite", args.night, t0, missing, _lane_args(args))


def _lane_args(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    return (Path(args.lane) if args.lane else None, Path(args.lane_history) if args.lane_history else None)


def _missing_shards(docs: list[dict]) -> list[str]:
    shards = [d["shard"] for d in docs if d.get("shard")]
    if not shards:
        return []
    n = int(shards[0].split("/")[1])
    return [f"{i}/{n}" for i in range(1, n + 1) if f"{i}/{n}" not in shards]


def _wall(docs: list[dict], elapsed: float) -> float:
    """Unsharded: ``elapsed`` covers the whole run; merged: the slowest shard plus the merge."""
    shards = [d.get("wall_s", 0.0) for d in docs if d.get("shard")]
    return max(shards) + elapsed if shards else elapsed


def finalize(
    out: Path,
    docs: list[dict],
    history_path: Path,
    night: str | None,
    t0: float,
    missing_dirs: list[str] | None = None,
    lane: tuple[Path | None, Path | None] = (None, None),
) -> int:
    """Cross-cell checks, history, report; prints every unexpected cell and where the report is.

    ``lane``: the guard lane's folder (default ``out/lane``) and history (ci/upstream_lane.py)."""
    lane_result = latest_lane(out, lane[0], lane[1], datetime.now(UTC))
    cells = [from_dict(CellResult, c, f"cell {i}") for d in docs for i, c in enumerate(d["cells"])]
    settings = docs[0]["settings"]
    night = night or _now()
    with History(history_path) as hist:
        earlier = len(hist.nights())
        history_note = (
            f"history: {earlier} earlier night(s)"
            if earlier
            else "history: none before this night (a new history starts)"
        )
        extra_reasons: dict[str, list[str]] = {}
        checks = [expect.check_accept_length(cells, hist.previous_accept_lengths(), settings["accept_length_drop"])]
        if settings["checks"].get("output_parity", True):
            checks.append(expect.check_parity(cells))
        if settings["checks"].get("lossless", True):
            checks.append(expect.check_lossless(cells))
        for found in checks:
            for cell, reasons in found.items():
                extra_reasons.setdefault(cell, []).extend(reasons)
        for c in cells:
            c.judge(extra_reasons.get(c.name))
        problems = [f"shard {s} reported no results" for s in _missing_shards(docs)]
        problems += [f"no {RESULTS} in {d}" for d in missing_dirs or []]
        problems += lane_problems(lane_result)
        bad = [c for c in cells if c.verdict != "expected"]
        verdict = "fail" if bad or problems else "pass"
        env = docs[0].get("environment", {})
        hist.append_night(
            night, _now(), verdict, cells, {"matrix": docs[0]["matrix"], "environment": env, "problems": problems}
        )
        trend = hist.trend_rows()
    summary = {
        "night": night,
        "matrix": docs[0]["matrix"],
        "verdict": verdict,
        "cells_total": len(cells),
        "wall_s": _wall(docs, time.perf_counter() - t0),
        "shards": [d["shard"] for d in docs if d.get("shard")],
        "environment": env,
        "problems": problems,
        "history": str(Path(history_path).resolve()),
        "history_note": history_note,
        "lane": lane_result,
        "unexpected": [{"cell": c.name, "reasons": c.reasons} for c in bad]
        + [{"cell": "(merge)", "reasons": [p]} for p in problems],
    }
    report = write_report(out, summary, cells, trend)
    for c in bad:
        for r in c.reasons:
            print(f"UNEXPECTED {c.name}: {r}", file=sys.stderr)
    for p in problems:
        print(f"UNEXPECTED (merge): {p}", file=sys.stderr)
    print(f"{len(cells) - len(bad)}/{len(cells)} cells as expected; verdict {verdict}; {history_note}")
    print(f"report: {report.resolve()}")
    return 1 if verdict == "fail" else 0


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(
        prog="python -m workbench_ci.nightly", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--matrix", default="ci/matrix.yaml", help="matrix file, YAML or JSON (default %(default)s)")
    ap.add_argument("--out", default="artifacts/nightly", help="artifact folder (default %(default)s)")
    ap.add_argument("--shard", default=None, help="run shard i/N only (1-based) and write partial results")
    ap.add_argument("--merge", nargs="+", default=None, metavar="DIR", help="merge shard folders into one report")
    ap.add_argument("--jobs", type=int, default=None, help="notebooks at once (default: min(cores, cells))")
    ap.add_argument("--history", default=None, help="history database (default: OUT/history.sqlite)")
    ap.add_argument("--night", default=None, help="label of this night in the history (default: UTC now)")
    ap.add_argument("--model-dir", default=None, help="model checkpoints for every notebook that takes model_dir")
    ap.add_argument("--only", nargs="+", default=None, metavar="TEXT", help="only cells whose name contains TEXT")
    ap.add_argument(
        "--lane",
        default=None,
        metavar="DIR",
        help="the upstream guard lane's output (workbench upstream nightly --out DIR), shown in the report "
        "(default: OUT/lane)",
    )
    ap.add_argument(
        "--lane-history", default=None, metavar="FILE", help="the lane's JSON-lines history (its last night)"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run, shard or merge; 0 when every cell ended as expected, 1 otherwise, 2 on a usage error, 143
    when SIGTERM stopped a run (its running notebooks, their kernels and what those started are ended
    first: ``run_cells`` ends them on the way out)."""
    args = build_parser().parse_args(argv)
    try:
        if args.merge:
            return _merge(args)
        with sigterm_exits():
            return _run(args)
    except (MatrixError, KernelSpecError, OSError) as e:
        print(f"workbench_ci.nightly: error: {e}", file=sys.stderr)
        return 2
    except Terminated as e:
        print("workbench_ci.nightly: terminated (SIGTERM); the running notebooks were ended", file=sys.stderr)
        return int(e.code)


if __name__ == "__main__":
    sys.exit(main())
