"""Read sites of the spec-input / forward-batch contract, enumerated syntactically.

Independent of the lint's analysis (`reads.py`, `flow.py`): every attribute load whose receiver is a
spec input or a forward batch, in every file of the folders the guard claims to cover, found by
walking each file's `ast` with its own, deliberately simple receiver rules:

- `spec_info`: a name ending in `spec_info` (`spec_info`, `draft_spec_info`) or an attribute
  `<x>.spec_info`; and a name bound to one (`info = forward_batch.spec_info`) in the same function;
- `forward_batch`: the names `forward_batch`, `fb`, `model_worker_batch`, `batch` and attributes
  `<x>.forward_batch`.

A method looked up for a call (`spec_info.is_draft_input()`) is a site too: a class without it
crashes the same way. A site is (file, line, function, receiver, attribute, guard): `guard` is `getattr` for
`getattr(x, "a", default)`, `hasattr` for a read under an `if hasattr(x, "a")`, else None. These
sites are the population an oracle can sample from without asking the lint what it sees; the lint's
own reads are compared against them by `lint_coverage`.
"""

from __future__ import annotations

import ast
from collections import Counter

from ..sources.trees import SourceTree

COVERED = ("sglang/srt/layers/attention/", "sglang/srt/model_executor/", "sglang/srt/speculative/")
BATCH_NAMES = frozenset({"forward_batch", "fb", "model_worker_batch", "batch"})
# Attributes every Python object has: never a contract field.
_NOT_FIELDS = frozenset({"__class__", "__dict__"})


def receiver_kind(node: ast.AST, spec_locals: frozenset = frozenset()) -> str | None:
    """`spec_info`, `forward_batch` or None for the receiver expression of an attribute load."""
    if isinstance(node, ast.Name):
        if node.id.endswith("spec_info") or node.id in spec_locals:
            return "spec_info"
        return "forward_batch" if node.id in BATCH_NAMES else None
    if isinstance(node, ast.Attribute):
        if node.attr.endswith("spec_info"):
            return "spec_info"
        return "forward_batch" if node.attr == "forward_batch" else None
    return None


def _spec_locals(fn: ast.AST) -> frozenset:
    """Names a function binds to a spec input (`x = <...>.spec_info`)."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and receiver_kind_value(node.value) == "spec_info":
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(out)


def receiver_kind_value(node: ast.AST) -> str | None:
    """What an assigned value is: `<x>.spec_info` or a `*spec_info` name -> `spec_info`."""
    if isinstance(node, ast.Attribute) and node.attr.endswith("spec_info"):
        return "spec_info"
    if isinstance(node, ast.Name) and node.id.endswith("spec_info"):
        return "spec_info"
    return None


def _hasattr_guarded(fn: ast.AST) -> set[tuple[int, str]]:
    """(line, attribute) of every load under an `if hasattr(<recv>, "a")` body."""
    out = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.If):
            continue
        for call in ast.walk(node.test):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "hasattr"
                and len(call.args) == 2
                and isinstance(call.args[1], ast.Constant)
            ):
                for stmt in node.body:
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Attribute) and sub.attr == call.args[1].value:
                            out.add((sub.lineno, sub.attr))
    return out


def _functions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(qualname, node) of every function, methods as `Class.method`, module level as `<module>`."""
    out: list[tuple[str, ast.AST]] = [("<module>", tree)]

    def walk(node: ast.AST, prefix: str) -> None:
        for c in ast.iter_child_nodes(node):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}.{c.name}" if prefix else c.name
                out.append((q, c))
                walk(c, q)
            elif isinstance(c, ast.ClassDef):
                walk(c, f"{prefix}.{c.name}" if prefix else c.name)

    walk(tree, "")
    return out


def file_sites(fname: str, source: str) -> list[dict]:
    """Every contract read site of one file (innermost function wins for a line)."""
    tree = ast.parse(source, filename=fname)
    found: dict[tuple, dict] = {}
    for qual, fn in _functions(tree):
        spec_locals = _spec_locals(fn)
        guarded = _hasattr_guarded(fn)
        getattr_sites = set()
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                kind = receiver_kind(node.args[0], spec_locals)
                if kind:
                    guard = "getattr" if len(node.args) == 3 else None
                    getattr_sites.add((node.lineno, node.args[1].value))
                    key = (node.lineno, kind, node.args[1].value)
                    found[key] = _site(fname, node.lineno, qual, kind, node.args[1].value, guard)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
                continue
            kind = receiver_kind(node.value, spec_locals)
            if kind is None or node.attr in _NOT_FIELDS or (node.lineno, node.attr) in getattr_sites:
                continue
            guard = "hasattr" if (node.lineno, node.attr) in guarded else None
            found[(node.lineno, kind, node.attr)] = _site(fname, node.lineno, qual, kind, node.attr, guard)
    return sorted(found.values(), key=lambda s: (s["line"], s["receiver"], s["attr"]))


def _site(fname: str, line: int, function: str, receiver: str, attr: str, guard: str | None) -> dict:
    return {"file": fname, "line": line, "function": function, "receiver": receiver, "attr": attr, "guard": guard}


def enumerate_sites(tree: SourceTree) -> dict:
    """Every contract read site in the covered folders of `tree`, and the files that did not parse
    (named, never skipped silently)."""
    sites, unparsed = [], []
    for prefix in COVERED:
        for fname, text in sorted(tree.under(prefix).items()):
            if not fname.endswith(".py"):
                continue
            try:
                sites.extend(file_sites(fname, text))
            except SyntaxError as exc:
                unparsed.append(f"{fname}: {exc.msg} (line {exc.lineno})")
    return {"source": tree.label, "release": tree.release, "sites": sites, "unparsed": unparsed}


def summary(result: dict) -> dict:
    """Site counts by covered folder and receiver, and how many are guarded."""
    by = Counter()
    for s in result["sites"]:
        folder = next(p for p in COVERED if s["file"].startswith(p)).split("/")[-2]
        by[(folder, s["receiver"], "guarded" if s["guard"] else "unguarded")] += 1
    return {f"{f}|{r}|{g}": n for (f, r, g), n in sorted(by.items())}


def lint_coverage(result: dict, analysis: dict) -> dict:
    """How many unguarded `spec_info` read sites in `layers/attention/` the lint's backend reads
    include (by file and line), and the ones it does not."""
    lint_lines = {(r["file"], r["line"]) for be in analysis["backends"].values() for r in be["reads"]}
    pop = [
        s
        for s in result["sites"]
        if s["file"].startswith(COVERED[0]) and s["receiver"] == "spec_info" and not s["guard"]
    ]
    seen = [s for s in pop if (s["file"], s["line"]) in lint_lines]
    unseen = [s for s in pop if (s["file"], s["line"]) not in lint_lines]
    return {
        "sites": len(pop),
        "in_lint": len(seen),
        "share": round(len(seen) / len(pop), 3) if pop else None,
        "not_in_lint": [f"{s['file']}:{s['line']} {s['function']} {s['attr']}" for s in unseen],
    }
