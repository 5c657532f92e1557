"""Static (ast-only) analysis of sglang sources: who declares, reads and installs `kv_indptr`.

Nothing here imports the analysed code; every function takes source text.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

FIELD = "kv_indptr"
SPEC_BASE = "SpecInput"
# Read kinds, from least to most defensive against an object that lacks the attribute.
PLAIN, NONE_GUARD, GETATTR, HASATTR, WRITE = "plain", "none_guard", "getattr", "hasattr", "write"
SAFE_KINDS = frozenset({GETATTR, HASATTR})


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _base_name(node.value)
    return ast.unparse(node)


def _field_decl(cls: ast.ClassDef, field: str) -> dict | None:
    """The class-level (or __init__/__post_init__ self.) declaration of `field` in `cls`, if any."""
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field:
            return {
                "kind": "annotation",
                "line": stmt.lineno,
                "annotation": ast.unparse(stmt.annotation),
                "default": None if stmt.value is None else ast.unparse(stmt.value),
            }
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == field for t in stmt.targets):
            return {"kind": "assignment", "line": stmt.lineno, "annotation": None, "default": ast.unparse(stmt.value)}
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name in ("__init__", "__post_init__"):
            for node in ast.walk(stmt):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else ([node.target] if isinstance(node, ast.AnnAssign) else [])
                )
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr == field
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        return {
                            "kind": f"self in {stmt.name}",
                            "line": node.lineno,
                            "annotation": None,
                            "default": ast.unparse(node.value) if getattr(node, "value", None) is not None else None,
                        }
    return None


def collect_classes(sources: dict[str, str], field: str = FIELD) -> dict[str, dict]:
    """Every top-level class in `sources` ({filename: text}): file, line, bases, own `field`."""
    classes: dict[str, dict] = {}
    for fname, text in sorted(sources.items()):
        tree = ast.parse(text, filename=fname)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                decorators = [_base_name(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]
                classes.setdefault(
                    node.name,
                    {
                        "file": fname,
                        "line": node.lineno,
                        "bases": [_base_name(b) for b in node.bases],
                        "dataclass": "dataclass" in decorators,
                        "declares": _field_decl(node, field),
                    },
                )
    return classes


def _ancestors(name: str, classes: dict[str, dict]) -> Iterator[str]:
    """`name`'s bases, depth-first left-to-right (an MRO approximation), each once."""
    seen: set[str] = set()
    stack = list(reversed(classes.get(name, {}).get("bases", [])))
    while stack:
        base = stack.pop()
        if base in seen:
            continue
        seen.add(base)
        yield base
        stack.extend(reversed(classes.get(base, {}).get("bases", [])))


def spec_input_classes(sources: dict[str, str], field: str = FIELD) -> dict[str, dict]:
    """Spec-input classes (transitive subclasses of SpecInput) and whether each has `field`.

    `has_field` counts a declaration in the class or in any base/mixin defined in `sources`;
    `field_from` names the class that declares it.
    """
    classes = collect_classes(sources, field)
    result: dict[str, dict] = {}
    for name, info in classes.items():
        ancestors = list(_ancestors(name, classes))
        if SPEC_BASE not in ancestors:
            continue
        owner = name if info["declares"] else next((a for a in ancestors if classes.get(a, {}).get("declares")), None)
        result[name] = {
            "file": info["file"],
            "line": info["line"],
            "bases": info["bases"],
            "dataclass": info["dataclass"],
            "has_field": owner is not None,
            "field_from": owner,
            "declaration": classes[owner]["declares"] if owner else None,
        }
    return result


def _is_spec_expr(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id.endswith("spec_info")
    return isinstance(node, ast.Attribute) and node.attr.endswith("spec_info")


class _Scanner(ast.NodeVisitor):
    def __init__(self, field: str, lines: list[str]):
        self.field, self.lines = field, lines
        self.scope: list[str] = []
        self.parents: dict[int, ast.AST] = {}
        self.found: list[dict] = []

    def _add(self, node: ast.AST, kind: str) -> None:
        self.found.append(
            {
                "line": node.lineno,
                "kind": kind,
                "safe": kind in SAFE_KINDS,
                "function": ".".join(self.scope) or "<module>",
                "code": self.lines[node.lineno - 1].strip(),
            }
        )

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.parents[id(child)] = node
        super().generic_visit(node)

    def _scoped(self, node: ast.AST) -> None:
        self.scope.append(node.name)  # type: ignore[attr-defined]
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == self.field and _is_spec_expr(node.value):
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                self._add(node, WRITE)
            else:
                parent = self.parents.get(id(node))
                guard = (
                    isinstance(parent, ast.Compare)
                    and parent.left is node
                    and all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops)
                    and all(isinstance(c, ast.Constant) and c.value is None for c in parent.comparators)
                )
                self._add(node, NONE_GUARD if guard else PLAIN)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        args = node.args
        if (
            isinstance(func, ast.Name)
            and func.id in ("getattr", "hasattr")
            and len(args) >= 2
            and _is_spec_expr(args[0])
            and isinstance(args[1], ast.Constant)
            and args[1].value == self.field
        ):
            if func.id == "hasattr":
                self._add(node, HASATTR)
            else:
                self._add(node, GETATTR if len(node.args) >= 3 else PLAIN)
        self.generic_visit(node)


def field_accesses(source: str, field: str = FIELD, filename: str = "<src>") -> list[dict]:
    """Every access to `<...>spec_info.<field>` in `source`: line, kind, safe, function, code.

    kind: "plain" (raises if missing), "none_guard" (`x.kv_indptr is None`, still raises if
    missing), "getattr" (with a default), "hasattr", or "write".
    """
    scanner = _Scanner(field, source.splitlines())
    scanner.visit(ast.parse(source, filename=filename))
    return sorted(scanner.found, key=lambda a: (a["line"], a["kind"]))


def summarize_accesses(accesses: list[dict]) -> dict:
    """Per-file summary: whether it reads the field, the read kinds, lines, unsafe reads."""
    reads = [a for a in accesses if a["kind"] != WRITE]
    return {
        "reads": bool(reads),
        "kinds": sorted({a["kind"] for a in reads}),
        "read_lines": [a["line"] for a in reads],
        "unsafe_reads": sum(1 for a in reads if not a["safe"]),
        "writes": sum(1 for a in accesses if a["kind"] == WRITE),
    }


USES = ("built", "returned", "passed", "installed")  # weakest to strongest evidence


def _construction(node: ast.AST, class_names: set[str]) -> tuple[str, str] | None:
    """(class, how) when `node` is `Cls(...)` or `Cls.create_*(...)` for a listed class."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name) and func.id in class_names:
        return func.id, "constructor"
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in class_names
        and func.attr.startswith("create")
    ):
        return func.value.id, func.attr
    return None


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _mark(rec: dict | None, use: str) -> None:
    if rec is not None and USES.index(use) > USES.index(rec["use"]):
        rec["use"] = use


def _scan_function(
    func: ast.FunctionDef | ast.AsyncFunctionDef, class_names: set[str], records: dict[tuple, dict]
) -> None:
    by_call: dict[int, dict] = {}
    for node in ast.walk(func):
        made = _construction(node, class_names)
        if made:
            rec = records.setdefault(
                (node.lineno, *made), {"class": made[0], "how": made[1], "line": node.lineno, "use": "built"}
            )
            rec.update(function=func.name, draft_extend="draft_extend" in func.name)
            by_call[id(node)] = rec
    local = {
        t.id: by_call[id(n.value)]
        for n in ast.walk(func)
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and id(n.value) in by_call
        for t in _targets(n)
        if isinstance(t, ast.Name)
    }

    def refers(expr: ast.AST | None) -> dict | None:
        if isinstance(expr, ast.Name):
            return local.get(expr.id)
        return by_call.get(id(expr))

    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            if any(isinstance(t, ast.Attribute) and t.attr == "spec_info" for t in _targets(node)):
                _mark(refers(node.value), "installed")
        elif isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                _mark(refers(arg), "passed")
            if isinstance(node.func, ast.Attribute):
                _mark(refers(node.func.value), "passed")
        elif isinstance(node, ast.Return):
            _mark(refers(node.value), "returned")


def spec_info_installs(source: str, class_names: set[str], filename: str = "<src>") -> list[dict]:
    """Spec-input objects built in each function and what the function does with each.

    use: "installed" (the call, or a local bound to it, is assigned to `*.spec_info`),
    "passed" (handed to a call or a method of it is called, e.g. one that installs itself),
    "returned", or "built". draft_extend: the function's name mentions draft_extend.
    """
    tree = ast.parse(source, filename=filename)
    records: dict[tuple, dict] = {}
    for func in ast.walk(tree):  # outer functions come first, so the innermost name wins
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _scan_function(func, class_names, records)
    return sorted(records.values(), key=lambda r: (r["line"], r["class"]))


def draft_extend_spec_info(installs: list[dict]) -> list[str]:
    """Classes a worker installs (or hands on) as the draft-extend pass's spec_info."""
    return sorted({r["class"] for r in installs if r["draft_extend"] and r["use"] in ("installed", "passed")})
