"""The guard's pipeline over releases and checkouts: sources -> static analysis -> verdicts.

`check` lints each source tree and, with `replay`, gives every finding a verdict from the replay
side; with `end_to_end` too, the confirmed findings on a path the real runtime drives are run
on the released runtime itself (`runtime/e2e.py`: `confirmed end to end` where it raised at the
read). The steps of one tree (`check_tree`) fill in each finding's JSON form; `check` reads every
finding once, strictly, as a `Finding` (`static/finding.py`), and the gate (`gate.py`), SARIF
(`sarif.py`) and the lane (`lane.py`) read its fields.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from workbench.run.serialise import to_dict

from .context import UpstreamContext
from .replay.verdicts import replay_verdicts
from .runtime.e2e import end_to_end_verdicts
from .sources.releases import check_version, check_versions, known_releases
from .sources.trees import SourceTree, checkout_tree, nearest_release, release_tree
from .static.finding import read_findings
from .static.lint import analyse


def summary(analysis: dict) -> dict:
    """The JSON-sized part of a lint analysis (no per-read lists)."""
    return {
        "source": analysis["source"],
        "forward_modes": analysis["forward_modes"],
        "backend_classes": len(analysis["backends"]),
        "spec_reads": sum(len(b["reads"]) for b in analysis["backends"].values()),
        "spec_inputs": {
            n: {"file": c["file"], "line": c["line"], "attrs": len(c["attrs"])}
            for n, c in analysis["spec_inputs"].items()
        },
        "installs": analysis["installs"],
        "unresolved_installs": analysis["unresolved_installs"],
        "runner_sites": analysis.get("runner_sites", []),
        "unparsed": analysis.get("unparsed", []),
    }


def check_tree(
    ctx: UpstreamContext, tree: SourceTree, env_release: str | None, replay: bool, end_to_end: bool = False
) -> dict:
    """Lint one source tree; with `replay`, run its replay matrix and give every finding a verdict; with
    `end_to_end` too, run the confirmed findings the real runtime can drive end to end."""
    analysis = analyse(tree)
    out = {
        "source": tree.label,
        "release": tree.release,
        "base": str(tree.base) if tree.base else None,
        "prefix": tree.prefix,
        "lint": summary(analysis),
        "findings": analysis["findings"],
        "replay": None,
        "end_to_end": None,
    }
    ctx.log(
        f"[{tree.label}] lint: {len(analysis['findings'])} finding(s), "
        f"{len(analysis['installs'])} installs, {len(analysis['backends'])} backend classes"
    )
    if not replay:
        return out
    if env_release:
        ctx = ctx.replace(env_release=env_release)
    out["findings"], out["replay"] = replay_verdicts(ctx, tree, analysis)
    if end_to_end and out["replay"]["status"] == "ok":
        out["findings"], out["end_to_end"] = end_to_end_verdicts(ctx, tree, env_release, out["findings"])
    return out


def check(
    ctx: UpstreamContext,
    versions: list[str] | None = None,
    src: Path | None = None,
    replay: bool = True,
    end_to_end: bool = False,
) -> dict:
    """Lint (and with `replay`, verdict) releases and/or a checkout. Findings (`Finding`s, in each result and
    all of them under `findings`) are read strictly from the steps' JSON forms (`RecordError` names the field).

        A checkout is replayed (and run end to end) on `ctx.env_release`'s environment, or the nearest
        release's. `end_to_end` (with `replay`): the opt-in real-runtime step (module docstring).
    """
    results = []
    for v in check_versions(ctx, versions or []):
        results.append(check_tree(ctx, release_tree(ctx, v), v, replay, end_to_end))
    if src is not None:
        tree = checkout_tree(src)
        known = known_releases(ctx)
        env_v = check_version(ctx.env_release, known) if ctx.env_release else nearest_release(tree.release, known)
        res = check_tree(ctx, tree, env_v, replay, end_to_end)
        res.update(declared_version=tree.release, env_release=env_v)
        results.append(res)
    for r in results:
        r["findings"] = read_findings(r["findings"], f"{r['source']}: findings")
    return {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "sources": [r["source"] for r in results],
        "findings": [f for r in results for f in r["findings"]],
        "results": results,
    }


def check_json(result: dict) -> dict:
    """The JSON form of a `check` result (each finding's `to_dict`)."""
    return {
        **result,
        "findings": [to_dict(f) for f in result["findings"]],
        "results": [{**r, "findings": [to_dict(f) for f in r["findings"]]} for r in result["results"]],
    }
