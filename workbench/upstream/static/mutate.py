"""Source rewrites for the recall measurement: mutants of a release whose finding is known by construction.

Every rewrite works on a file's text with the positions `ast` gives (UTF-8 byte columns), never
on the tree: the mutant is real source the lint reads as it reads a release. Helpers a rewrite
needs are appended at the end of the module, so the lines above them keep their numbers.
"""

from __future__ import annotations

import ast

from .flow import parse

HELPER_PREFIX = "_wb_mutant_"


class MutationError(ValueError):
    """The rewrite does not apply to this source (the mutant is skipped, and counted as such)."""


def _offsets(text: str) -> list[int]:
    """Byte offset of each line start of `text` (1-based line i starts at offsets[i - 1])."""
    out, pos = [], 0
    for line in text.encode("utf-8").splitlines(keepends=True):
        out.append(pos)
        pos += len(line)
    out.append(pos)
    return out


def splice(text: str, edits: list[tuple[ast.AST, str]]) -> str:
    """`text` with each node's source replaced (edits must not overlap)."""
    data, starts = text.encode("utf-8"), _offsets(text)
    spans = []
    for node, new in edits:
        a = starts[node.lineno - 1] + node.col_offset
        b = starts[node.end_lineno - 1] + node.end_col_offset
        spans.append((a, b, new.encode("utf-8")))
    for a, b, new in sorted(spans, reverse=True):
        data = data[:a] + new + data[b:]
    return data.decode("utf-8")


def segment(text: str, node: ast.AST) -> str:
    """The source of `node`."""
    data, starts = text.encode("utf-8"), _offsets(text)
    a = starts[node.lineno - 1] + node.col_offset
    b = starts[node.end_lineno - 1] + node.end_col_offset
    return data[a:b].decode("utf-8")


def _tree(path: str, text: str) -> ast.Module:
    tree = parse(path, text)
    if tree is None:
        raise MutationError(f"{path} does not parse")
    return tree


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise MutationError(f"no top-level class {name}")


def _delete_stmt(text: str, stmt: ast.stmt) -> str:
    """Replace a statement that owns its lines by `pass` and blank lines: every line keeps its number."""
    lines = text.splitlines(keepends=True)
    first, last = lines[stmt.lineno - 1], lines[stmt.end_lineno - 1]
    head = first.encode("utf-8")[: stmt.col_offset].decode("utf-8", "replace")
    rest = last.encode("utf-8")[stmt.end_col_offset :].decode("utf-8", "replace").strip()
    if head.strip() or (rest and not rest.startswith("#")):
        raise MutationError(f"statement at line {stmt.lineno} shares its lines")
    span = stmt.end_lineno - stmt.lineno + 1
    return "".join(lines[: stmt.lineno - 1] + [f"{head}pass\n"] + ["\n"] * (span - 1) + lines[stmt.end_lineno :])


def remove_attribute(text: str, path: str, cls: str, attr: str) -> str:
    """Remove `attr` from class `cls`: its field or class attribute, and `self.<attr> = ...` in
    `__init__` / `__post_init__` (each a statement of its own, left as `pass` so that no line
    moves). MutationError when the class defines nothing of that name, or only as a method or
    property (not a field)."""
    found = True
    changed = False
    while found:
        found = False
        node = _class(_tree(path, text), cls)
        for stmt in node.body:
            names = []
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names = [stmt.target.id]
            elif isinstance(stmt, ast.Assign):
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            if attr in names:
                if len(names) > 1 or (isinstance(stmt, ast.Assign) and len(stmt.targets) > 1):
                    raise MutationError(f"{cls}.{attr} shares its assignment")
                text, found = _delete_stmt(text, stmt), True
                break
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if stmt.name == attr:
                    raise MutationError(f"{cls}.{attr} is a method or property, not a field")
                if stmt.name in ("__init__", "__post_init__"):
                    hit = _self_assign(stmt, attr)
                    if hit is not None:
                        text, found = _delete_stmt(text, hit), True
                        break
        changed = changed or found
    if not changed:
        raise MutationError(f"class {cls} in {path} defines no attribute {attr}")
    return text


def _self_assign(func: ast.FunctionDef, attr: str) -> ast.stmt | None:
    """The first `self.<attr> = ...` statement of `func`."""
    todo = [func.body]
    while todo:
        block = todo.pop(0)
        for s in block:
            targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == attr and getattr(t.value, "id", None) == "self":
                    if len(targets) > 1:
                        raise MutationError(f"self.{attr} shares its assignment")
                    return s
            for name in ("body", "orelse", "finalbody"):
                sub = getattr(s, name, None)
                if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                    todo.append(sub)
    return None


def add_attribute(text: str, path: str, cls: str, attr: str) -> str:
    """Give class `cls` a class attribute `attr = None` (the negative control of a removal)."""
    node = _class(_tree(path, text), cls)
    first = node.body[0]
    lines = text.splitlines(keepends=True)
    line = lines[first.lineno - 1]
    indent = line[: len(line) - len(line.lstrip())]
    return "".join(lines[: first.lineno - 1] + [f"{indent}{attr} = None\n"] + lines[first.lineno - 1 :])


def _spec_arg(call: ast.Call) -> bool:
    a = call.args[0] if call.args else None
    if isinstance(a, ast.Name):
        return a.id.endswith("spec_info")
    return isinstance(a, ast.Attribute) and a.attr.endswith("spec_info")


def guard_sites(text: str, path: str, line: int, attr: str) -> list[ast.Call]:
    """`getattr(<spec>, attr, default)` and `hasattr(<spec>, attr)` calls on `line`."""
    out = []
    for node in ast.walk(_tree(path, text)):
        if (
            isinstance(node, ast.Call)
            and node.lineno == line
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == attr
            and _spec_arg(node)
        ):
            if node.func.id == "hasattr" or len(node.args) >= 3:
                out.append(node)
    return out


def remove_guard(text: str, path: str, line: int, attr: str) -> str:
    """Unguard the read of `attr` on `line`: `getattr(x, attr, d)` -> `x.attr`; `hasattr(x, attr)` -> `True`."""
    sites = guard_sites(text, path, line, attr)
    if not sites:
        raise MutationError(f"no getattr/hasattr guard of {attr!r} at {path}:{line}")
    edits = []
    for call in sites:
        new = "True" if call.func.id == "hasattr" else f"{segment(text, call.args[0])}.{attr}"
        edits.append((call, new))
    return splice(text, edits)


MOVES = ("return", "tuple", "factory", "dict", "conditional", "replace", "setattr")


def _install_node(tree: ast.Module, line: int) -> tuple[ast.stmt, ast.expr, ast.expr | None]:
    """(statement, installed value, assignment target or None) of the install on `line`."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.lineno == line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "spec_info" and node.value is not None:
                    if len(targets) > 1:
                        raise MutationError(f"install at line {line} has several targets")
                    return node, node.value, t
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno == line:
            for k in node.keywords:
                if k.arg == "spec_info":
                    stmt = _enclosing_stmt(tree, node)
                    return stmt, k.value, None
    raise MutationError(f"no spec_info install at line {line}")


def _enclosing_stmt(tree: ast.Module, target: ast.AST) -> ast.stmt:
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.If, ast.With)):
            if any(n is target for n in ast.walk(node)):
                if best is None or node.lineno >= best.lineno:
                    best = node
    if best is None:
        raise MutationError("install outside a statement")
    return best


def move_install(text: str, path: str, line: int, how: str, n: int) -> tuple[str, int]:
    """Rewrite the install on `line` the way real code installs inputs (`how` in MOVES).

    Returns (new text, the install's new line). `n` numbers the helpers (unique per mutant).
    """
    tree = _tree(path, text)
    stmt, value, target = _install_node(tree, line)
    src = segment(text, value)
    name = f"{HELPER_PREFIX}{n}"
    lines = text.splitlines(keepends=True)
    first = lines[stmt.lineno - 1]
    indent = first[: len(first) - len(first.lstrip())]
    tail = ""
    before = ""
    if how == "return":  # returned by a function, bound to a local by the caller, installed
        before = f"{indent}{name}_value = {name}_make({src})\n"
        new = f"{name}_value"
        tail = f"\n\ndef {name}_make(value):\n    built = value\n    return built\n"
    elif how == "tuple":  # returned in a tuple with a flag, unpacked by the caller
        before = f"{indent}{name}_value, {name}_ok = {name}_make({src})\n"
        new = f"{name}_value"
        tail = f"\n\ndef {name}_make(value):\n    return value, value is not None\n"
    elif how == "factory":  # built two calls away: a factory calling a builder
        call = value if isinstance(value, ast.Call) else None
        if call is not None and isinstance(call.func, (ast.Name, ast.Attribute)):
            args = ", ".join(segment(text, a) for a in [*call.args, *call.keywords])
            new = f"{name}_factory({args})"
            tail = (
                f"\n\ndef {name}_factory(*args, **kwargs):\n    return {name}_build(*args, **kwargs)\n"
                f"\n\ndef {name}_build(*args, **kwargs):\n    return {segment(text, call.func)}(*args, **kwargs)\n"
            )
        else:
            new = f"{name}_factory({src})"
            tail = (
                f"\n\ndef {name}_factory(value):\n    return {name}_build(value)\n"
                f"\n\ndef {name}_build(value):\n    return value\n"
            )
    elif how == "dict":  # chosen from a dict of inputs
        before = f"{indent}{name}_choices = {{True: {src}, False: None}}\n"
        new = f"{name}_choices[True]"
    elif how == "conditional":
        new = f"({src} if {name}_flag else None)"
    elif how == "replace":
        new = f"dataclasses.replace({src})"
    elif how == "setattr":
        if target is None or not isinstance(stmt, ast.Assign):
            raise MutationError("setattr needs an assignment install")
        body = f"setattr({segment(text, target.value)}, 'spec_info', {src})"
        out = splice(text, [(stmt, body)])
        return out, line
    else:
        raise MutationError(f"unknown move {how!r}; choose one of {', '.join(MOVES)}")
    out = splice(text, [(value, new)])
    if before:
        out_lines = out.splitlines(keepends=True)
        out = "".join(out_lines[: stmt.lineno - 1] + [before] + out_lines[stmt.lineno - 1 :])
        line += before.count("\n")
    if tail:
        out = out.rstrip("\n") + "\n" + tail
    return out, line
