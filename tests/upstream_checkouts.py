"""Test checkouts built from release sources: the state between two PRs, and a git history for bisect.

`make_checkout("0.5.14", dest, drop_field=("EagleDraftExtendInput", "kv_indptr"))` unpacks the
release's cached wheel as `dest/python/sglang` and deletes that one field line: PR #24860 merged,
PR #28221 not yet (a state no release shipped).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from workbench.upstream.context import UpstreamContext
from workbench.upstream.sources.trees import release_tree

SPEC_FILE = "sglang/srt/speculative/eagle_info.py"


def drop_field_line(path: Path, cls: str, field: str) -> int:
    """Delete the class-level declaration of `field` in `cls` in the file at `path`; its line."""
    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) == field:
                    lines = text.splitlines(keepends=True)
                    del lines[stmt.lineno - 1 : stmt.end_lineno]
                    path.write_text("".join(lines))
                    return stmt.lineno
    raise ValueError(f"{path}: class {cls} declares no field {field!r}")


def make_checkout(version: str, dest: Path, drop_field: tuple[str, str] | None = None) -> Path:
    """`dest` laid out like an sglang checkout (`python/sglang/...`) from the release's sources."""
    release_tree(UpstreamContext(), version).write(dest)
    if drop_field:
        drop_field_line(Path(dest) / "python" / SPEC_FILE, *drop_field)
    return Path(dest)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=workbench", "-c", "user.email=workbench@localhost", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_history(version: str, dest: Path, unrelated_after: int = 3) -> dict:
    """A git repo: the release, then the kv_indptr field removed, then unrelated commits.

    Returns {"release": sha, "removal": sha, "head": sha, "commits": [sha, ...]}.
    """
    repo = make_checkout(version, dest)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"sglang {version} sources")
    shas = [_git(repo, "rev-parse", "HEAD")]
    drop_field_line(repo / "python" / SPEC_FILE, "EagleDraftExtendInput", "kv_indptr")
    _git(repo, "commit", "-qam", "Remove kv_indptr from EagleDraftExtendInput")
    shas.append(_git(repo, "rev-parse", "HEAD"))
    for i in range(unrelated_after):
        note = repo / "python" / "sglang" / f"NOTES_{i}.md"
        note.write_text(f"unrelated change {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"Unrelated change {i}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
    return {"release": shas[0], "removal": shas[1], "head": shas[-1], "commits": shas}
