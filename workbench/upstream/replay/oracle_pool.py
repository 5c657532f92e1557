"""Replaying many mutants of one release in one release interpreter (``wb_driver/forks.py``).

`replay_mutants(ctx, tree, jobs)` starts one process in the release's environment with the
release's own sources first on ``sys.path``; for each job (a mutant: its edited files and its
cases) that process forks a child that swaps the job's files in by an import overlay and runs the
ordinary replay driver on the cases. A job's answer has the shape of `front.replay`'s (``status``,
``cases``, ``run_s``, ``message``), so the oracle judges it the same way.

Only a release's own tree can be used (the overlay serves the edited files under the release's
paths); a job whose child ends without a result (past its limit, killed, crashed) answers
``status`` ``timeout`` or ``error`` with why.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..context import UpstreamContext
from ..release_process import read_result, run_in_release
from ..sources.envs import EnvBuildError, ensure_env
from ..sources.trees import SourceTree

TARGET = "replay.wb_driver.forks"
START_S = 240.0  # the parent's own start (its imports) within the process's wall limit


def replay_mutants(
    ctx: UpstreamContext, tree: SourceTree, jobs: list[tuple[str, dict[str, str], list[dict]]], job_limit_s: float
) -> dict[str, dict]:
    """{job name: replay answer} for `jobs` = [(name, changes, cases)] on release `tree`'s sources,
    each job under `job_limit_s` seconds; never raises for a failed run."""
    if not tree.release or not tree.label.startswith("sglang "):
        raise ValueError(f"{tree.label}: the mutant pool replays a release's own tree only")
    if not jobs:
        return {}
    answers: dict[str, dict] = {}
    try:
        env = ensure_env(ctx, tree.release)
    except EnvBuildError as exc:
        msg = f"the release environment of {tree.release} could not be built: {exc}"
        return {name: {"status": "error", "cases": [], "run_s": 0.0, "message": msg} for name, _, _ in jobs}
    folder = Path(tempfile.mkdtemp(prefix="wb-mutant-pool-"))
    try:
        cfg_jobs = [
            {"name": name, "changes": changes, "cases": cases, "result_path": str(folder / f"job{i}.result.json")}
            for i, (name, changes, cases) in enumerate(jobs)
        ]
        cfg = {"src_root": str(env.src_root), "job_limit_s": job_limit_s, "jobs": cfg_jobs}
        run = run_in_release(
            env.python,
            TARGET,
            cfg,
            START_S + job_limit_s * len(jobs),
            paths=[str(env.src_root)],
            run_dir=folder,
            name="pool",
        )
        ended = {r["name"]: r for r in (run.result or {}).get("jobs") or []}
        for job in cfg_jobs:
            rec = ended.get(job["name"])
            res = read_result(Path(job["result_path"]))
            if res is None:
                why = (
                    f"the child ended {rec['ended']} (exit {rec['exit_code']}) after {rec['wall_s']} s with no result"
                    if rec
                    else f"the pool process ended ({run.cause}) before this job; output tail: {run.output[-600:]}"
                )
                status = "timeout" if rec and rec["ended"] == "deadline" else "error"
                answers[job["name"]] = {"status": status, "cases": [], "run_s": rec and rec["wall_s"], "message": why}
                continue
            answers[job["name"]] = {
                "status": res.get("status", "error"),
                "cases": res.get("cases", []),
                "run_s": rec["wall_s"] if rec else res.get("run_s"),
                "message": None if res.get("status") == "ok" else f"{res.get('exception')}: {res.get('message')}",
                "env": res.get("env"),
                "traceback": res.get("traceback"),
            }
        return answers
    finally:
        shutil.rmtree(folder, ignore_errors=True)
