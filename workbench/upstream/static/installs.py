"""Which spec-input class a speculative worker installs as `spec_info`, for which forward mode.

A construction (`Cls(...)`, `Cls.create_idle_input(...)`) is followed to where it becomes a
batch's `spec_info`: assigned to `<x>.spec_info` or passed as `spec_info=` in the same function,
through a local, into a helper's parameter that the helper installs, or returned to a caller
that installs the result. The forward mode is the first `forward_mode` assignment at or after
the install in that function (an `a if c else b` gives both), else one before it, else one
read off the function's name (`mode_from: "name"`); an idle input (`create_idle_input`) is IDLE.
An install whose mode none of these gives is returned apart (`mode_from: "unknown"`).
"""

from __future__ import annotations

import ast

from .modes import mode_names

_NAME_MODES = (
    ("prefill", ("EXTEND", "IDLE")),
    ("draft_extend", ("DRAFT_EXTEND", "DRAFT_EXTEND_V2", "IDLE")),
    ("verify", ("TARGET_VERIFY", "IDLE")),
    ("draft", ("DECODE", "IDLE")),
    ("extend", ("EXTEND", "IDLE")),
)
# CUDA-graph runners build spec inputs for capture/replay, which do not go through
# init_forward_metadata; they are left out (and counted in `skipped_files`).
SKIP_FILE = "cuda_graph"


def construction(node: ast.AST, class_names: set[str]) -> tuple[str, str] | None:
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


def _functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _installs_in(func: ast.FunctionDef) -> list[tuple[ast.expr, int, str]]:
    """(value, line, kind) of every `<x>.spec_info = value` (assign) and `spec_info=value` (keyword)."""
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "spec_info" for t in node.targets
        ):
            out.append((node.value, node.lineno, "assign"))
        elif isinstance(node, ast.Call):
            out += [(k.value, node.lineno, "keyword") for k in node.keywords if k.arg == "spec_info"]
    return out


def _modes_at(func: ast.FunctionDef, line: int, members: set[str]) -> tuple[set[str], str]:
    sets = []
    for node in ast.walk(func):
        value = None
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "forward_mode" for t in node.targets
        ):
            value = node.value
        elif isinstance(node, ast.Call):
            value = next((k.value for k in node.keywords if k.arg == "forward_mode"), None)
        if value is not None and (names := mode_names(value) & members):
            sets.append((node.lineno, names))
    after = sorted((ln, s) for ln, s in sets if ln >= line)
    before = sorted(((ln, s) for ln, s in sets if ln < line), reverse=True)
    if after or before:
        return (after or before)[0][1], "assigned"
    for key, modes in _NAME_MODES:
        if key in func.name:
            return {m for m in modes if m in members}, "name"
    return set(), "unknown"


def _refers(value: ast.expr, name: str | None, node: ast.AST) -> bool:
    return value is node or (name is not None and isinstance(value, ast.Name) and value.id == name)


def scan_installs(sources: dict[str, str], classes: set[str], members: list[str]) -> list[dict]:
    """Installs of `classes` in `sources`: class, how, modes, mode_from, file:line of each step."""
    mset = set(members)
    funcs: dict[str, list[tuple[str, ast.FunctionDef]]] = {}
    trees = {}
    for fname, text in sorted(sources.items()):
        if SKIP_FILE in fname.rsplit("/", 1)[-1]:
            continue
        try:
            trees[fname] = ast.parse(text, filename=fname)
        except SyntaxError:
            continue
        for f in _functions(trees[fname]):
            funcs.setdefault(f.name, []).append((fname, f))
    out: list[dict] = []

    def record(
        cls: str, how: str, built: tuple[str, int], fname: str, func: ast.FunctionDef, line: int, kind: str
    ) -> None:
        modes, source = _modes_at(func, line, mset)
        if how.startswith("create_idle"):
            modes, source = {"IDLE"}, "idle input"
        out.append(
            {
                "class": cls,
                "how": how,
                "kind": "idle_input" if how.startswith("create_idle") else kind,
                "modes": sorted(modes),
                "mode_from": source,
                "built_at": f"{built[0]}:{built[1]}",
                "install_file": fname,
                "install_line": line,
                "install_function": func.name,
            }
        )

    for fname, tree in trees.items():
        for func in _functions(tree):
            for node in ast.walk(func):
                made = construction(node, classes)
                if not made:
                    continue
                cls, how = made
                built = (fname, node.lineno)
                local = next(
                    (
                        t.id
                        for a in ast.walk(func)
                        if isinstance(a, (ast.Assign, ast.AnnAssign)) and a.value is node
                        for t in (a.targets if isinstance(a, ast.Assign) else [a.target])
                        if isinstance(t, ast.Name)
                    ),
                    None,
                )
                found = False
                for value, line, kind in _installs_in(func):
                    if _refers(value, local, node):
                        record(cls, how, built, fname, func, line, kind)
                        found = True
                for call in ast.walk(func):
                    if not isinstance(call, ast.Call):
                        continue
                    callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
                    for pos, arg in [*enumerate(call.args), *((k.arg, k.value) for k in call.keywords)]:
                        if not _refers(arg, local, node) or callee not in funcs:
                            continue
                        for cfile, cfunc in funcs[callee]:
                            params = [a.arg for a in cfunc.args.args]
                            if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
                                params = params[1:]
                            pname = params[pos] if isinstance(pos, int) and pos < len(params) else pos
                            for value, line, _ in _installs_in(cfunc):
                                if isinstance(value, ast.Name) and value.id == pname:
                                    record(cls, how, built, cfile, cfunc, line, "helper")
                                    found = True
                returned = any(
                    isinstance(r, ast.Return) and r.value is not None and _refers(r.value, local, node)
                    for r in ast.walk(func)
                )
                if returned and not found:
                    for cfile, ctree in trees.items():
                        for cfunc in _functions(ctree):
                            for value, line, _ in _installs_in(cfunc):
                                if (
                                    isinstance(value, ast.Call)
                                    and getattr(value.func, "attr", getattr(value.func, "id", None)) == func.name
                                ):
                                    record(cls, how, built, cfile, cfunc, line, "return")
    unique = {(r["class"], r["how"], r["built_at"], r["install_file"], r["install_line"]): r for r in out}
    return sorted(unique.values(), key=lambda r: (r["class"], r["install_file"], r["install_line"]))
