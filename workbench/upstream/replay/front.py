"""The one front end of the replays: a release, a checkout (or an edited tree) or a crash bundle's
batch, replayed on the release environment it belongs to.

`replay(ctx, target, cases)` resolves the environment (a release's own; a checkout's
``ctx.env_release`` or the nearest release), the sources to put first (the release's unpacked
wheel, the checkout's folder, or an edited tree written to a temporary folder), runs every case in
one driver process and returns the driver's records with where and how they ran. Each run a case
returns is read once here (``run_end.read_run``); a case with a run that does not fit its record
becomes an error case (``error`` names the field, ``stage`` ``driver record``), so its findings stay
unverified rather than judged from a run the readers misread.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from workbench.run.serialise import RecordError

from ..context import UpstreamContext
from ..sources.envs import EnvBuildError, ensure_env
from ..sources.releases import check_version, known_releases
from ..sources.trees import SourceTree, nearest_release
from .driver import run_driver
from .run_end import case_runs


def env_release_of(ctx: UpstreamContext, tree: SourceTree) -> str:
    """The release whose environment replays `tree`: its own, else `ctx.env_release`, else the nearest."""
    known = known_releases(ctx)
    if tree.label.startswith("sglang ") and tree.release:
        return check_version(tree.release, known)
    if ctx.env_release:
        return check_version(ctx.env_release, known)
    return nearest_release(tree.release, known)


def replay(
    ctx: UpstreamContext,
    target: str | SourceTree,
    cases: list[dict],
    bundle: dict | None = None,
    extra: dict | None = None,
) -> dict:
    """Run `cases` on `target` (a release version or a source tree); never raises for a failed run.

    Returns {"status": ok | error | timeout, "cases": [driver records], "env_release", "env_group",
    "sources", "run_s", "message", "stage", "env"}; `bundle` is a crash bundle's batch (rows, seq_lens).
    """
    tree = target if isinstance(target, SourceTree) else None
    version = env_release_of(ctx, tree) if tree is not None else str(target)
    out: dict = {"status": "error", "cases": [], "env_release": version, "run_s": 0.0, "message": None}
    scratch = None
    try:
        src_root = None
        if tree is not None and tree.changes:
            scratch = Path(tempfile.mkdtemp(prefix="wb-tree-"))
            src_root = tree.write(scratch) / "python"
        elif tree is not None and not tree.label.startswith("sglang "):
            src_root = tree.root
            if src_root is None:
                out["message"] = f"{tree.label}: sources held in memory only; nothing to import"
                return out
        try:
            env = ensure_env(ctx, version, src_root=src_root)
        except EnvBuildError as exc:
            out.update(message=f"the release environment of {version} could not be built: {exc}", stage="environment")
            return out
        out.update(env_group=env.group, sources=str(env.src_root), env_cached=env.cached, env_notes=env.notes)
        cfg = {"cases": cases, "src_root": str(env.src_root), "bundle": bundle, **(extra or {})}
        run = run_driver(ctx, env.python, cfg)
        out["run_s"] = round(run.wall_s, 1)
        if run.result is None:
            out.update(
                status="timeout" if run.timed_out else "error",
                message=f"no result from the replay process; stderr tail: {run.stderr[-600:]}",
            )
            return out
        res = run.result
        out.update(
            status=res.get("status", "error"),
            cases=[_checked(c) for c in res.get("cases", [])],
            env=res.get("env"),
            stage=res.get("stage"),
            driver_s=res.get("run_s"),
        )
        if out["status"] != "ok":
            out["message"] = f"{res.get('exception')}: {res.get('message')}"
            out["missing"] = res.get("missing")
            out["traceback"] = res.get("traceback")
        return out
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _checked(case: dict) -> dict:
    """The driver's record of one case, its runs read strictly (module docstring)."""
    try:
        case_runs(case)
    except RecordError as exc:
        return {**case, "error": f"the driver's run does not fit its record: {exc}", "stage": "driver record"}
    return case
