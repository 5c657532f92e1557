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

from .env import ensure_env
from .guard import checkout_version, nearest_release
from .lint import analyse, dir_sources, finding_key, source_root
from .releases import Log, check_version, default_cache_dir, echo, known_releases
from .triage import replay_matrix

DEFAULT_CASE = {
    "module": "sglang.srt.speculative.eagle_info",
    "class": "EagleDraftExtendInput",
    "mode": "IDLE",
    "backend": "triton",
}


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
    """`spec` is `backend|backend_class|mode|class|attribute` with any field left empty or `*`."""
    want = spec.split("|")
    have = finding_key(finding).split("|")
    if len(want) == 4:  # backend|mode|class|attribute
        have = [have[0], *have[2:]]
    return len(want) == len(have) and all(w in ("", "*", h) for w, h in zip(want, have, strict=False))


def is_bad(
    tree: Path, finding: str | None, env_release: str, cache_dir: Path, log: Log, timeout_s: float
) -> tuple[bool, str]:
    """(bad?, why) for one exported tree."""
    if finding:
        hits = [f for f in analyse(dir_sources(tree), str(tree))["findings"] if _matches(f, finding)]
        return bool(hits), (f"lint finding at {hits[0]['read'].split('/')[-1]}" if hits else "no such finding")

    env = ensure_env(env_release, cache_dir, log=log, src_root=source_root(tree))
    matrix = replay_matrix(env, [DEFAULT_CASE], timeout_s)
    case = (matrix["cases"] or [{}])[0]
    if case.get("status") == "crashed":
        return True, f"{case['exception_type']}: {case['message']}"
    if case.get("status") == "ok":
        return False, f"ok: kv_indptr={case.get('metrics', {}).get('kv_indptr')}"
    raise BisectError(
        f"replay could not decide: {case.get('status') or matrix['status']}: "
        f"{case.get('message') or matrix.get('message')}"
    )


def bisect(
    repo: Path,
    good: str,
    bad: str,
    finding: str | None = None,
    env_release: str | None = None,
    cache_dir: Path | None = None,
    log: Log = echo,
    timeout_s: float = 900,
) -> dict:
    """Binary search for the first bad commit in (good, bad]; `good` assumed good, `bad` bad."""
    repo = Path(repo).expanduser().resolve()
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    commits = commits_between(repo, good, bad)
    if not commits:
        raise BisectError(f"no commits between --good {good} and --bad {bad}")
    tried: list[dict] = []
    lo, hi = -1, len(commits) - 1  # commits[hi] is bad; everything up to lo is good
    scratch = Path(tempfile.mkdtemp(prefix="wb-bisect-"))
    try:
        env_v = env_release
        while hi - lo > 1:
            mid = (lo + hi) // 2
            c = commits[mid]
            step = scratch / c["sha"][:12]
            step.mkdir()
            tree = export_tree(repo, c["sha"], step)
            if env_v is None:
                known = known_releases(cache_dir)
                env_v = nearest_release(checkout_version(tree), known)
            else:
                env_v = check_version(env_v, known_releases(cache_dir))
            start = time.perf_counter()
            verdict, why = is_bad(tree, finding, env_v, cache_dir, log, timeout_s)
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
