"""git bisect over an sglang checkout: the first commit whose replay crashes (or whose lint
reports a chosen finding), in O(log n) replays.

Each tried commit's tree is exported with `git archive` into a temporary folder (the user's
checkout and its index are never touched) and checked there like `--sglang-src`.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from .context import UpstreamContext
from .replay.cases import SEED_CASE
from .replay.front import replay
from .replay.run_end import describe, ended
from .sources.releases import check_version, known_releases
from .sources.trees import checkout_tree, nearest_release
from .static.lint import analyse, finding_key


class BisectError(ValueError):
    """A bad repository or revision; the message names it."""


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BisectError(f"git {' '.join(args)} in {repo}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.strip()


def commits_between(repo: Path, good: str, bad: str) -> list[dict]:
    """First-parent commits after `good` up to and including `bad`, oldest first."""
    good_sha, bad_sha = (_git(repo, "rev-parse", "--verify", f"{r}^{{commit}}") for r in (good, bad))
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", good_sha, bad_sha]).returncode:
        raise BisectError(f"--good {good} ({good_sha[:10]}) is not an ancestor of --bad {bad} ({bad_sha[:10]})")
    lines = _git(repo, "log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{good_sha}..{bad_sha}")
    return [dict(zip(("sha", "subject"), ln.split("\t", 1), strict=False)) for ln in lines.splitlines() if ln]


def export_tree(repo: Path, sha: str, dest: Path) -> Path:
    """`git archive` of `sha` (its python/ folder when it has one) unpacked into `dest`."""
    sub = (
        ["python"]
        if subprocess.run(
            ["git", "-C", str(repo), "cat-file", "-e", f"{sha}:python/sglang"], capture_output=True
        ).returncode
        == 0
        else []
    )
    tar = dest / "tree.tar"
    with open(tar, "wb") as out:
        proc = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", sha, *sub], stdout=out, stderr=subprocess.PIPE
        )
    if proc.returncode != 0:
        raise BisectError(f"git archive {sha}: {proc.stderr.decode(errors='replace')[-300:]}")
    with tarfile.open(tar) as tf:
        tf.extractall(dest / "tree", filter="data")
    tar.unlink()
    return dest / "tree"


def _matches(finding: dict, spec: str) -> bool:
    """`spec` is `backend|mode|class|attribute[|reading function]`, any field empty or `*`."""
    want = spec.split("|")
    have = finding_key(finding).split("|")[: len(want)]
    return len(want) in (4, 5) and all(w in ("", "*", h) for w, h in zip(want, have, strict=True))


def is_bad(ctx: UpstreamContext, tree: Path, finding: str | None, env_release: str) -> tuple[bool, str]:
    """(bad?, why) for one exported tree."""
    if finding:
        hits = [f for f in analyse(checkout_tree(tree))["findings"] if _matches(f, finding)]
        where = f"{hits[0]['read_file'].split('/')[-1]}:{hits[0]['read_line']}" if hits else ""
        return bool(hits), (f"lint finding at {where}" if hits else "no such finding")

    result = replay(ctx.replace(env_release=env_release), checkout_tree(tree), [{**SEED_CASE, "answer_missing": False}])
    case = (result["cases"] or [{}])[0]
    run = (case.get("runs") or [{}])[0]
    status, stop = ended(run)
    if status == "crashed":
        return True, f"{run['exception']}: {run['message']}"
    if (status, stop) == ("ok", None):
        return False, f"ok: kv_indptr={run.get('metrics', {}).get('kv_indptr')}"
    raise BisectError(
        f"replay could not decide: {describe(run) if run else result['status']}: "
        f"{case.get('error') or run.get('message') or result.get('message')}"
    )


def bisect(ctx: UpstreamContext, repo: Path, good: str, bad: str, finding: str | None = None) -> dict:
    """Binary search for the first bad commit in (good, bad]; `good` assumed good, `bad` bad.

    Replays run on `ctx.env_release`'s environment (default: the release nearest each commit's version).
    """
    repo = Path(repo).expanduser().resolve()
    log = ctx.log
    commits = commits_between(repo, good, bad)
    if not commits:
        raise BisectError(f"no commits between --good {good} and --bad {bad}")
    tried: list[dict] = []
    lo, hi = -1, len(commits) - 1  # commits[hi] is bad; everything up to lo is good
    scratch = Path(tempfile.mkdtemp(prefix="wb-bisect-"))
    try:
        env_v = ctx.env_release
        while hi - lo > 1:
            mid = (lo + hi) // 2
            c = commits[mid]
            step = scratch / c["sha"][:12]
            step.mkdir()
            tree = export_tree(repo, c["sha"], step)
            known = known_releases(ctx)
            env_v = check_version(env_v, known) if env_v else nearest_release(checkout_tree(tree).release, known)
            start = time.perf_counter()
            verdict, why = is_bad(ctx, tree, finding, env_v)
            tried.append({**c, "bad": verdict, "why": why, "s": round(time.perf_counter() - start, 1)})
            log(f"[bisect] {c['sha'][:10]} {c['subject'][:60]!r}: {'BAD' if verdict else 'good'} ({why})")
            shutil.rmtree(step, ignore_errors=True)
            if verdict:
                hi = mid
            else:
                lo = mid
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first = commits[hi]
    return {
        "repo": str(repo),
        "good": good,
        "bad": bad,
        "by": f"lint finding {finding}" if finding else "replay of EagleDraftExtendInput idle input, IDLE, triton",
        "env_release": env_v,
        "candidates": len(commits),
        "first_bad": first,
        "tried": tried,
        "replays": 0 if finding else len(tried),
        "steps": len(tried),
    }
