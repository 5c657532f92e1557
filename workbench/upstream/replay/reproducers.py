"""A report upstream can act on: for a confirmed idle-input finding, a folder with a standalone
reproducer, the smallest fix, and what was measured with both.

- ``repro.py``: ``repro_script.py`` with the finding's case written in (imports only sglang and torch);
- ``fix.diff``: the smallest fix, a class-level default ``<attr> = None`` on the spec-input class (the
  shape of PR #28221's Optional field), as a zero-context diff of the release's file;
- ``result.json``: the script run on the release (it must raise the finding's AttributeError at the
  finding's read line), on a copy of the release with the fix applied (it must complete), and on every
  release of ``range_versions`` (where the same script raises: the release range); the workbench
  commit, the date, the versions;
- ``README.md``: the finding, its reachability (the static side's), the commands, the results.

Each run of the script says how it ended in ``status`` (``repro_end.py``).
"""

from __future__ import annotations

import ast
import datetime as _dt
import difflib
import json
import pprint
import re
import shutil
import tempfile
from pathlib import Path

from workbench.run.provenance import workbench_commit

from ..context import UpstreamContext
from ..guard import check_tree
from ..release_process import run_in_release
from ..sources.envs import EnvBuildError, ensure_env
from ..sources.releases import check_versions, known_releases
from ..sources.trees import SourceTree, release_tree
from .cases import module_of
from .repro_end import describe, repro_ended

SCRIPT = Path(__file__).with_name("repro_script.py")


def slug(f: dict) -> str:
    return f"{f['backend']}-{f['mode']}-{f['spec_class']}-{f['attr']}".lower().replace("_", "-")


def script_text(f: dict) -> str:
    """The reproducer of finding `f` (its replay's idle-input arguments written in)."""
    case = {
        "key": f["key"],
        "backend": f["backend"],
        "backend_module": module_of(f["backend_file"]),
        "backend_class": f["backend_class"],
        "spec_module": module_of(f["spec_class_file"]),
        "spec_class": f["spec_class"],
        "idle_input_args": f["replay"]["idle_input_args"],
        "init_args": f["replay"].get("init_args"),
        "server_args": {"speculative_num_draft_tokens": 4, "speculative_num_steps": 3, "speculative_eagle_topk": 1},
        "expect": f"'{f['spec_class']}' object has no attribute '{f['attr']}' at {f['read_file']}:{f['read_line']}",
    }
    body = pprint.pformat(case, width=110, sort_dicts=False)  # a Python literal
    text = SCRIPT.read_text()
    marker = "CASE: dict = {}  # the finding this script reproduces (written by eagle-workbench)"
    return text.replace(marker, f"CASE: dict = {body}  # written by eagle-workbench {workbench_commit() or 'unknown'}")


def smallest_fix(tree: SourceTree, f: dict) -> dict:
    """The class-level default `<attr> = None` added after the class's last field: {path, text, diff, line}."""
    path = f["spec_class_file"]
    text = tree.files[path]
    cls = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef) and n.name == f["spec_class"])
    fields = [s for s in cls.body if isinstance(s, (ast.AnnAssign, ast.Assign))]
    first = cls.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    if fields:
        after, indent = fields[-1].end_lineno or fields[-1].lineno, " " * fields[-1].col_offset
    else:  # no field: right after the class docstring (or first thing in the body)
        after = (first.end_lineno or first.lineno) if docstring else first.lineno - 1
        indent = " " * first.col_offset
    optional = re.search(r"^from typing import [^\n]*\bOptional\b", text, re.M) is not None
    kind = "Optional[torch.Tensor]" if optional else "torch.Tensor"
    added = [
        f"{indent}# None on an idle rank's input: attention backends rebuild the metadata from seq_lens.\n",
        f"{indent}{f['attr']}: {kind} = None\n",
    ]
    lines = text.splitlines(keepends=True)
    new = "".join(lines[:after] + added + lines[after:])
    diff = "".join(difflib.unified_diff(lines, new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=0))
    return {"path": path, "text": new, "diff": diff, "line": after + 1, "kind": "class-level default None"}


def run_script(ctx: UpstreamContext, script: Path, version: str, src_root: Path | None = None) -> dict:
    """The reproducer under `version`'s release environment, `src_root` (default: the release) first."""
    try:
        env = ensure_env(ctx, version)
    except EnvBuildError as exc:
        return {"status": "error", "error": f"environment of {version}: {exc}"}
    run = run_in_release(
        env.python, str(script), {}, ctx.timeout_s, paths=[str(src_root or env.src_root)], name="repro"
    )
    if run.timed_out:
        return {"status": "timeout", "error": f"ran past {ctx.timeout_s} s"}
    if run.result is None:
        tail = run.output[-800:]
        return {
            "status": "error",
            "rc": run.exit_code,
            "error": tail.strip().splitlines()[-1] if tail.strip() else "",
            "tail": tail,
        }
    return {**run.result, "rc": run.exit_code}


def make_reproducer(ctx: UpstreamContext, tree: SourceTree, f: dict, out: Path, range_versions: list[str] = ()) -> dict:
    """Write `out/<slug>/` for confirmed idle finding `f` of release `tree`; return its result."""
    folder = (Path(out) / slug(f)).resolve()  # the script runs from a temporary working folder
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "repro.py"
    script.write_text(script_text(f))
    fix = smallest_fix(tree, f)
    (folder / "fix.diff").write_text(fix["diff"])
    version = tree.release
    result = {
        "key": f["key"],
        "finding": {
            k: f.get(k)
            for k in (
                "source",
                "backend_class",
                "mode",
                "spec_class",
                "attr",
                "read_file",
                "read_line",
                "read_code",
                "install_file",
                "install_line",
                "install_function",
            )
        },
        "verdict": f["verdict"],
        "verdict_reason": f["verdict_reason"],
        "reachability": f.get("reachability"),
        "fix": {k: fix[k] for k in ("kind", "path", "line")},
        "workbench_commit": workbench_commit(),
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "release": version,
    }
    ctx.log(f"[repro {slug(f)}] on sglang {version} ...")
    result["on_release"] = run_script(ctx, script, version)
    scratch = Path(tempfile.mkdtemp(prefix="wb-fix-"))
    try:
        fixed = tree.with_changes({fix["path"]: fix["text"]}, label=f"{tree.label} + fix").write(scratch)
        ctx.log(f"[repro {slug(f)}] on sglang {version} with the fix ...")
        result["with_fix"] = run_script(ctx, script, version, fixed / "python")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["releases"] = {}
    for v in range_versions:
        ctx.log(f"[repro {slug(f)}] on sglang {v} ...")
        result["releases"][v] = run_script(ctx, script, v)
    result["raises"] = sorted((v for v, r in result["releases"].items() if repro_ended(r)[0] == "crashed"), key=_vkey)
    loc = f"{f['read_file']}:{f['read_line']}"
    on_release = result["on_release"]
    result["reproduced"] = repro_ended(on_release)[0] == "crashed" and on_release.get("at") == loc
    result["fixed"] = repro_ended(result["with_fix"]) == ("ok", None)
    (folder / "result.json").write_text(json.dumps(result, indent=1))
    (folder / "README.md").write_text(readme(f, result, fix))
    return result


def _vkey(v: str):
    from packaging.version import Version

    return Version(v)


def readme(f: dict, r: dict, fix: dict) -> str:
    """The folder's README: the finding, how it is reached, the commands and what they gave."""
    reach = f.get("reachability") or {}
    reach_text = "\n".join(f"- {k}: {v}" for k, v in reach.items()) or "- not analysed (no reachability on the finding)"
    rng = r["raises"]
    span = f"{rng[0]} - {rng[-1]} ({len(rng)} of {len(r['releases'])} releases tried)" if rng else "none tried raised"
    return f"""# {f["backend_class"]} x {f["spec_class"]}.{f["attr"]} ({f["mode"]}), sglang {r["release"]}

`{f["read_code"]}` at `{f["read_file"]}:{f["read_line"]}` reads `spec_info.{f["attr"]}`; the
`{f["spec_class"]}` the workers install for an idle rank (`{f["install_file"]}:{f["install_line"]}`)
has no such attribute.

Verdict: **{f["verdict"]}**: {f["verdict_reason"]}

## Settings that reach it
{reach_text}

## Reproduce (CPU)
```
PYTHONPATH=<folder holding sglang {r["release"]}'s sglang/> TRITON_INTERPRET=1 python repro.py   # exit 1: crashed
```
On the release: {describe(r["on_release"])}: {r["on_release"].get("error", "")} at {r["on_release"].get("at")}

## The smallest fix ({fix["kind"]}, `fix.diff`)
Applied to a copy of the release's sources, the same script: {describe(r["with_fix"])}
(kv_indptr {r["with_fix"].get("kv_indptr")}).

## Release range
Raises on: {span}. Per release: {", ".join(f"{v} {describe(x)}" for v, x in r["releases"].items()) or "not run"}.

Measured {r["measured_at"]} by eagle-workbench {r["workbench_commit"]} (`workbench upstream repro`).
"""


def reproducers(ctx: UpstreamContext, version: str, out: Path, range_versions: list[str] | None = None) -> dict:
    """Lint and replay `version`, then write a reproducer folder for each confirmed idle finding,
    each run on every release of `range_versions` (default: the final releases 0.5.10 to `version`).
    Writes `out/index.json`; returns it."""
    from packaging.version import Version

    version = check_versions(ctx, [version])[0]
    if range_versions is None:
        low, high = Version("0.5.10"), Version(version)
        range_versions = sorted(
            (v for v in known_releases(ctx) if low <= Version(v) <= high and not Version(v).is_prerelease), key=_vkey
        )
    tree = release_tree(ctx, version)
    result = check_tree(ctx, tree, version, replay=True)
    confirmed = [f for f in result["findings"] if f["verdict"] == "confirmed"]
    index = {
        "release": version,
        "workbench_commit": workbench_commit(),
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": f"workbench upstream repro --sglang {version} --out {out}",
        "replay": result["replay"],
        "reproducers": {},
        "skipped": {},
    }
    for f in confirmed:
        replay = f.get("replay") or {}
        if f["mode"] != "IDLE" or (replay.get("idle_input_args") is None and replay.get("init_args") is None):
            index["skipped"][f["key"]] = f"a {f['mode']} batch: the reproducer builds padded idle batches only"
            continue
        r = make_reproducer(ctx, tree, f, out, range_versions)
        index["reproducers"][f["key"]] = {
            "folder": slug(f),
            **{k: r[k] for k in ("reproduced", "fixed", "raises", "reachability")},
        }
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "index.json").write_text(json.dumps(index, indent=1))
    return index
