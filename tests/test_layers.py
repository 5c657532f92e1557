"""The package reads bottom-up: a module imports only its own layer and the layers below it.

Imports are read with ast (function-level ones included; ``if TYPE_CHECKING:`` blocks are
annotations only and do not count). The layers, bottom-up:

    kernels -> core (mem, models, engine, backends) -> speculative -> debug (crash bundles)
    -> run (config, api, runner, record, timing, dp) -> experiments -> upstream -> views -> faces
    (cli, notebook, the package's lazy ``__init__``) -> ci
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTERNAL = ("kernels", "workbench", "ci")  # the project's top-level packages
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernels", ("kernels",)),
    ("core", ("workbench.mem", "workbench.models", "workbench.engine", "workbench.backends")),
    ("speculative", ("workbench.speculative",)),
    ("debug", ("workbench.debug",)),
    ("run", ("workbench.run",)),
    ("experiments", ("workbench.experiments",)),
    ("upstream", ("workbench.upstream",)),
    ("views", ("workbench.views",)),
    ("faces", ("workbench.cli", "workbench.notebook", "workbench.__main__", "workbench")),
    ("ci", ("ci",)),
)
# Faces that still live inside a lower package; each names why it is a face.
FACES_INSIDE = {
    "workbench.debug.cli": "`workbench debug`: the command line of the crash-bundle replay",
    "workbench.upstream.cli": "`workbench upstream ...`: the command line of the upstream guard",
    "workbench.upstream.__main__": "`python -m workbench.upstream`",
}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """Index of the module's layer in LAYERS (the longest matching prefix wins)."""
    if module in FACES_INSIDE:
        return next(i for i, (name, _) in enumerate(LAYERS) if name == "faces")
    best, best_len = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def runtime_imports(path: Path, root: Path, nodes: bool = False) -> Iterator[tuple[object, str, bool]]:
    """(line, module, inside a function) of every import executed at run time, relative ones resolved;
    with ``nodes`` the import's ast node instead of its line."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    in_function = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for n in ast.walk(node)
        if n is not node
    }
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            where = node if nodes else node.lineno
            yield from ((where, a.name, id(node) in in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            where = node if nodes else node.lineno
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                target = full if _is_module(full, root) else base
                yield where, target, id(node) in in_function


def _is_module(name: str, root: Path) -> bool:
    p = root.joinpath(*name.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def project_files(root: Path) -> list[Path]:
    return sorted(p for top in ("kernels", "workbench", "ci") for p in (root / top).rglob("*.py"))


def import_graph(root: Path) -> dict[str, set[str]]:
    """Internal module -> the internal modules it imports at run time."""
    graph: dict[str, set[str]] = {}
    for path in project_files(root):
        deps = graph.setdefault(module_name(path, root), set())
        for _, target, _ in runtime_imports(path, root):
            while target and not _is_module(target, root):
                target = target.rpartition(".")[0]
            if target and target.split(".")[0] in INTERNAL:
                deps.add(target)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan's algorithm,
    iterative), plus any module that imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(component)
    return found


def reason_of(node: ast.stmt, lines: list[str]) -> str | None:
    """The one-line reason a function-level import carries: a ``#`` comment ending one of its lines,
    or a comment line right above it."""
    for no in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        code, sep, comment = lines[no - 1].partition("#")
        if sep and comment.strip() and not comment.strip().startswith("noqa"):
            return comment.strip()
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
    return above.lstrip("#").strip() or None if above.startswith("#") else None


def upward_imports(root: Path) -> list[str]:
    found = []
    for path in project_files(root):
        src = module_name(path, root)
        for line, target, _ in runtime_imports(path, root):
            if target.split(".")[0] not in INTERNAL or target == "workbench":
                continue
            if layer_of(target) > layer_of(src):
                found.append(f"{path.relative_to(root)}:{line} imports {target}")
    return found


def unresolved_imports(root: Path) -> list[str]:
    """Internal imports naming a module that does not exist (a relative import left behind by a move)."""
    found = []
    for path in project_files(root):
        for line, target, _ in runtime_imports(path, root):
            entry = f"{path.relative_to(root)}:{line} imports {target}"
            if target.split(".")[0] in INTERNAL and not _is_module(target, root) and entry not in found:
                found.append(entry)
    return found


def test_every_internal_import_resolves():
    assert unresolved_imports(ROOT) == []


def test_every_project_module_has_a_layer():
    assert [m for m in import_graph(ROOT) if layer_of(m) < 0] == []


# Upward imports the layout moves left, to be folded away by the views wing (what renders moves into
# views/, the record stops rendering itself); this list may only shrink.
KNOWN_UPWARD = {
    ("workbench/experiments/compare.py", "workbench.views.plots.common"),
    ("workbench/experiments/sweep.py", "workbench.views.plots.common"),
    ("workbench/run/record.py", "workbench.views.display"),
    ("workbench/views/comparison.py", "workbench.notebook"),
    ("workbench/views/crash_bundle.py", "workbench.notebook"),
    ("workbench/views/display.py", "workbench.notebook"),
    ("workbench/views/upstream.py", "workbench.notebook"),
}


def test_nothing_imports_upward():
    found = {(e.split(":")[0], e.rpartition(" imports ")[2]) for e in upward_imports(ROOT)}
    assert found - KNOWN_UPWARD == set()


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The scanner itself: a runtime import counts (relative ones too), a TYPE_CHECKING one does not."""
    pkg = tmp_path / "workbench" / "models"
    pkg.mkdir(parents=True)
    (tmp_path / "workbench" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (tmp_path / "workbench" / "run").mkdir()
    (tmp_path / "workbench" / "run" / "__init__.py").write_text("")
    (tmp_path / "workbench" / "run" / "api.py").write_text("")
    (pkg / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import workbench.run\n"
        "def f():\n    from ..run import api\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward_imports(tmp_path) == ["workbench/models/bad.py:5 imports workbench.run.api"]


@pytest.mark.parametrize("module", ["workbench.debug.cli", "workbench.upstream.cli"])
def test_faces_inside_lower_packages_are_named(module):
    assert _is_module(module, ROOT), f"{module} moved: drop it from FACES_INSIDE"
