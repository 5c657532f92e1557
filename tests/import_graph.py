"""The project's import graph, read with ast, for the layering tests and the import census.

Imports are read with ast (function-level ones included; ``if TYPE_CHECKING:`` blocks are
annotations only and do not count). The layers, bottom-up:

    kernels -> core (mem, models, engine, backends) -> speculative -> debug (crash bundles)
    -> run (config, api, runner, record, timing, dp) -> experiments -> upstream -> views -> faces
    (cli, notebook, the package's lazy ``__init__``) -> ci
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERNAL = ("workbench_kernels", "workbench", "workbench_ci")  # the project's top-level packages (import names)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kernels", ("workbench_kernels",)),
    ("core", ("workbench.mem", "workbench.models", "workbench.engine", "workbench.backends")),
    ("speculative", ("workbench.speculative",)),
    ("debug", ("workbench.debug",)),
    ("run", ("workbench.run",)),
    ("experiments", ("workbench.experiments",)),
    ("upstream", ("workbench.upstream",)),
    ("views", ("workbench.views",)),
    ("faces", ("workbench.cli", "workbench.notebook", "workbench.__main__", "workbench")),
    ("ci", ("workbench_ci",)),
)


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    """Index of the module's layer in LAYERS (the longest matching prefix wins)."""
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
                target = full if is_module(full, root) else base
                yield where, target, id(node) in in_function


def is_module(name: str, root: Path) -> bool:
    p = root.joinpath(*name.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def project_files(root: Path) -> list[Path]:
    """The packages' files under their import names (workbench_ci and workbench_kernels are links to ci/ and
    kernels/), so that a file's path relative to ``root`` is its module's name; in a checkout from before
    those names (tests/import_census.py reads old ones), under the folders' own names."""
    folders = {"workbench_kernels": "kernels", "workbench": "workbench", "workbench_ci": "ci"}
    tops = [top if (root / top).exists() else folders[top] for top in INTERNAL]
    return sorted(p for top in tops for p in (root / top).rglob("*.py"))


def import_graph(root: Path) -> dict[str, set[str]]:
    """Internal module -> the internal modules it imports at run time."""
    graph: dict[str, set[str]] = {}
    for path in project_files(root):
        deps = graph.setdefault(module_name(path, root), set())
        for _, target, _ in runtime_imports(path, root):
            while target and not is_module(target, root):
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


def _trailing_comment(line: str) -> str | None:
    code, sep, comment = line.partition("#")
    comment = comment.strip()
    return comment if sep and comment and not comment.startswith("noqa") else None


def reason_of(node: ast.stmt, lines: list[str], enclosing: ast.AST | None = None) -> str | None:
    """The one-line reason a function-level import carries: a ``#`` comment ending one of its lines;
    else a comment line right above it or above the run of imports it belongs to; else a comment
    ending the ``def`` line of the function that holds it (a function whose job is to load lazily)."""
    for no in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        if (comment := _trailing_comment(lines[no - 1])) is not None:
            return comment
    no = node.lineno - 1
    while no >= 1 and (not lines[no - 1].strip() or lines[no - 1].strip().startswith(("from ", "import "))):
        no -= 1  # the imports just above this one (isort's sections apart) share its reason
    above = lines[no - 1].strip() if no >= 1 else ""
    if above.startswith("#") and above.lstrip("#").strip():
        return above.lstrip("#").strip()
    if isinstance(enclosing, ast.FunctionDef | ast.AsyncFunctionDef):
        return _trailing_comment(lines[enclosing.lineno - 1])
    return None


def function_level_imports(path: Path, root: Path) -> Iterator[tuple[ast.stmt, str, ast.AST, list[str]]]:
    """(import node, internal module, the innermost function holding it, the file's lines) of every
    internal import made inside a function, one per statement."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    holder: dict[int, ast.AST] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for n in ast.walk(fn):
                if n is not fn and (id(n) not in holder or holder[id(n)].lineno < fn.lineno):
                    holder[id(n)] = fn
    by_line = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            by_line[node.lineno] = node
    seen = set()
    for line, target, inside in runtime_imports(path, root):
        if inside and target.split(".")[0] in INTERNAL and line not in seen:
            seen.add(line)
            node = by_line[line]
            yield node, target, holder.get(id(node)), lines


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
            if target.split(".")[0] in INTERNAL and not is_module(target, root) and entry not in found:
                found.append(entry)
    return found


# What renders: the libraries that draw or display, and HTML markup in a string (a tag, not a ``<placeholder>``).
RENDERING_LIBRARIES = ("matplotlib", "pygments", "IPython.display", "IPython.core.display", "tqdm")
HTML_TAG = re.compile(
    r"<(table|thead|tbody|tr|td|th|div|span|img|pre|details|summary|html|body|section|h[1-6]|p|b|i|em|strong|"
    r"code|ul|ol|li|a|br|style|script)(\s[^<>]*)?/?>",
    re.IGNORECASE,
)
# Above the views: ci writes the nightly's own pages (report.html, the notebooks' HTML copies, JUnit).
RENDERERS_ABOVE_VIEWS = ("workbench_ci",)


def rendering(path: Path, root: Path) -> list[str]:
    """What ``path`` does that only ``workbench/views`` may: import a rendering library, or hold HTML."""
    found = []
    for line, target, _ in runtime_imports(path, root):
        if any(target == lib or target.startswith(lib + ".") for lib in RENDERING_LIBRARIES):
            found.append(f"{path.relative_to(root)}:{line} imports {target}")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and HTML_TAG.search(node.value):
            found.append(f"{path.relative_to(root)}:{node.lineno} writes HTML {HTML_TAG.search(node.value).group(0)!r}")
    return found
