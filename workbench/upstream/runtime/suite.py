"""The real runtime's standard set of runs for one release and backend, and its shipped measurement.

Roles (what notebook 06 and the nightly show):

- ``dp2``: DP attention, rank 1 idle, the release as shipped;
- ``dp2+verify-input``: the same with the verify input's ``kv_indptr`` declared (the smallest fix);
- ``dp1``: one rank (the outputs DP 2 must equal);
- ``between+verify-input``: the release's sources with ``EagleDraftExtendInput.kv_indptr`` deleted (PR
  #24860 merged, #28221 not yet), the verify pass fixed so the draft-extend pass is reached;
- ``between+verify-input+pr-28221``: the same with PR #28221's field added back from the workbench.

The other algorithms (asked for by name): ``eagle-dp1`` and ``eagle-dp2`` (the EAGLE-1 head; at DP 2 the idle
rank's draft-extend reaches ``llama_eagle``'s rotary with 0 tokens), ``eagle-dp2+eagle-idle-batch+verify-input``
(that crash's fix, and the verify pass's, which the idle rank reaches next) and ``standalone-dp1`` (the target's
first two layers as the draft).

The V1 worker's roles (0.5.12, whose ``--disable-overlap-schedule`` picks it; asked for by name):

- ``v1-dp2``: DP 2 as shipped (the idle rank's first padded batch with a spec input, the draft pass);
- ``v1-dp1``: one rank;
- ``v1-dp2+triton-idle-fallback+verify-input``: 0.5.13's seq_lens fallback backported and the verify
  input fixed, so the idle rank reaches the V1 worker's draft-extend (``forward_draft_extend_after_decode``);
- ``v1-dp2+triton-idle-fallback+verify-input+pr-28221``: the same with PR #28221's field.

    python -m workbench.upstream.runtime.suite --sglang 0.5.13 0.5.14 --out workbench/assets/runtime_runs.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path

from workbench.run.provenance import workbench_commit
from workbench.upstream.context import UpstreamContext, echo
from workbench.upstream.sources.trees import release_tree
from workbench.upstream.static.mutate import MutationError, remove_attribute

from .release_run import code_state, run_runtime

ROLES: dict[str, dict] = {
    "dp2": {"dp": 2},
    "dp2+verify-input": {"dp": 2, "fixes": ["verify-input"]},
    "dp1": {"dp": 1},
    "between+verify-input": {"dp": 2, "fixes": ["verify-input"], "between": True},
    "between+verify-input+pr-28221": {"dp": 2, "fixes": ["verify-input", "pr-28221"], "between": True},
    "v1-dp2": {"dp": 2, "disable_overlap_schedule": True},
    "v1-dp1": {"dp": 1, "disable_overlap_schedule": True},
    "v1-dp2+triton-idle-fallback+verify-input": {
        "dp": 2,
        "fixes": ["triton-idle-fallback", "verify-input"],
        "disable_overlap_schedule": True,
    },
    "v1-dp2+triton-idle-fallback+verify-input+pr-28221": {
        "dp": 2,
        "fixes": ["triton-idle-fallback", "verify-input", "pr-28221"],
        "disable_overlap_schedule": True,
    },
    # the other algorithms the real runtime starts (release_run.ALGORITHMS), asked for by name
    "eagle-dp1": {"dp": 1, "algorithm": "EAGLE"},
    "eagle-dp2": {"dp": 2, "algorithm": "EAGLE"},
    "eagle-dp2+eagle-idle-batch+verify-input": {
        "dp": 2,
        "algorithm": "EAGLE",
        "fixes": ["eagle-idle-batch", "verify-input"],
    },
    "standalone-dp1": {"dp": 1, "algorithm": "STANDALONE"},
}
DROPPED = ("EagleDraftExtendInput", "kv_indptr")
SPEC_FILE = "sglang/srt/speculative/eagle_info.py"


def between_prs_checkout(ctx: UpstreamContext, release: str, dest: Path) -> Path:
    """``dest`` laid out as an sglang checkout (``python/sglang``) of ``release`` with
    ``EagleDraftExtendInput.kv_indptr`` removed (its field left as ``pass``: no line moves): PR #24860
    merged, #28221 not yet, a state no release shipped. ValueError for a release without the field."""
    tree = release_tree(ctx, release)
    try:
        text = remove_attribute(tree.files[SPEC_FILE], SPEC_FILE, *DROPPED)
    except MutationError as exc:  # the release never declared the field (0.5.12, 0.5.13)
        raise ValueError(f"sglang {release}: {exc}") from None
    return tree.with_changes({SPEC_FILE: text}, label=f"sglang {release} minus {'.'.join(DROPPED)}").write(dest)


def command(release: str, backend: str, spec: dict) -> str:
    """The CLI line that runs one role (a between-PRs role names its checkout folder BETWEEN)."""
    parts = ["workbench upstream run", f"--sglang {release}", f"--dp {spec['dp']}", f"--backend {backend}"]
    if spec.get("between"):
        parts.append("--sglang-src BETWEEN")
    if spec.get("algorithm"):
        parts.append(f"--speculative-algorithm {spec['algorithm']}")
    parts += [f"--fix {f}" for f in spec.get("fixes", [])]
    if spec.get("disable_overlap_schedule"):
        parts.append("--disable-overlap-schedule")
    return " ".join(parts)


def run_roles(
    ctx: UpstreamContext,
    release: str,
    backend: str = "triton",
    roles: list[str] | None = None,
    **kwargs,
) -> dict[str, dict]:
    """role -> run record; the between-PRs checkout is built in a temporary folder and removed."""
    roles = list(roles or ROLES)
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise ValueError(f"unknown role {bad}; valid: {', '.join(ROLES)}")
    out: dict[str, dict] = {}
    between = None
    try:
        for role in roles:
            spec = dict(ROLES[role])
            src = None
            if spec.pop("between", False):
                if between is None:
                    between = Path(tempfile.mkdtemp(prefix="wb-between-"))
                    try:
                        between_prs_checkout(ctx, release, between)
                    except ValueError as exc:
                        raise ValueError(
                            f"role {role}: {exc}; the between-PRs state is built from a release "
                            "that declares the field (0.5.14 or later)"
                        ) from None
                src = between
            rec = run_runtime(ctx, release, backend=backend, sglang_src=src, **spec, **kwargs)
            rec["role"], rec["command"] = role, command(release, backend, ROLES[role])
            if src is not None:
                state = f"sglang {release} minus {DROPPED[0]}.{DROPPED[1]}"
                rec["config"]["sglang_src"] = f"{state} (between PR #24860 and #28221)"
                rec["config"]["revision"] = code_state(release, src, spec.get("fixes", []), label=state)
            out[role] = rec
    finally:
        if between is not None:
            shutil.rmtree(between, ignore_errors=True)
    return out


def provenance(old: dict | None, old_runs: list[str], part: dict) -> dict:
    """The file's provenance after writing ``part`` (its date, command, commit, host and the run keys
    it wrote): every earlier part keeps its own commit and date for the runs it still holds, and
    the top-level fields sum them up (the latest date, every command and commit in order)."""
    parts = list(old.get("parts") or [{**old, "runs": old_runs}]) if old else []
    parts = [{**p, "runs": [k for k in p["runs"] if k not in part["runs"]]} for p in parts]
    parts = [p for p in parts if p["runs"]] + [part]
    commits = list(dict.fromkeys(p["commit"] for p in parts))
    return {
        "generated_at": part["generated_at"],
        "command": "; ".join(p["command"] for p in parts),
        "commit": ", ".join(commits),
        "host": part["host"],
        "parts": parts,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sglang", nargs="+", required=True, metavar="X")
    ap.add_argument("--backend", nargs="+", default=["triton"], choices=["triton", "torch_native"])
    ap.add_argument("--roles", nargs="+", default=None, choices=list(ROLES))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--append", action="store_true", help="add to the runs already in --out")
    args = ap.parse_args(argv)
    old = json.loads(args.out.read_text()) if args.append and args.out.exists() else None
    runs = dict(old["runs"]) if old else {}
    written = []
    for release in args.sglang:
        for backend in args.backend:
            for role, rec in run_roles(UpstreamContext(), release, backend, args.roles).items():
                runs[f"{release}/{backend}/{role}"] = rec
                written.append(f"{release}/{backend}/{role}")
    part = {
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m workbench.upstream.runtime.suite " + " ".join(argv or []),
        "commit": workbench_commit(),
        "host": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} cores",
        "runs": written,
    }
    doc = {"provenance": provenance(old["provenance"] if old else None, list(old["runs"]) if old else [], part)}
    doc["runs"] = runs
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    echo(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    import sys

    from workbench.run.supervisor import exits_on_sigterm

    sys.exit(exits_on_sigterm("workbench.upstream.runtime.suite", lambda: main(sys.argv[1:])))
