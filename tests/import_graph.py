"""The project's import graph, read with ast, for the layering tests and the import census.

Imports are read with ast (function-level ones included; ``if TYPE_CHECKING:`` blocks are
annotations only and do not count). The layers, bottom-up:

    kernels -> core (mem, models, engine, backends) -> speculative -> debug (crash bundles)
    -> run (config, api, runner, record, timing, dp) -> experiments -> upstream -> views -> faces
    (cli, notebook, the package's lazy ``__init__``) -> ci
"""

from __future__ import annotations

import ast
import functools
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


def parse(path: Path) -> ast.Module:
    """The file's ast, parsed once per content: the layering tests read every file several times (the tree
    is shared, so no caller may change it)."""
    st = path.stat()
    return _parse(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4096)
def _parse(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text())


@functools.lru_cache(maxsize=4096)
def _import_nodes(tree: ast.Module) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    """(node, inside a function) of the tree's import statements outside ``if TYPE_CHECKING:`` blocks."""
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
    return tuple(
        (node, id(node) in in_function)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in typing_only
    )


def runtime_imports(path: Path, root: Path, nodes: bool = False) -> Iterator[tuple[object, str, bool]]:
    """(line, module, inside a function) of every import executed at run time, relative ones resolved;
    with ``nodes`` the import's ast node instead of its line."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node, inside in _import_nodes(parse(path)):
        where = node if nodes else node.lineno
        if isinstance(node, ast.Import):
            yield from ((where, a.name, inside) for a in node.names)
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                target = full if is_module(full, root) else base
                yield where, target, inside


# A string naming an internal module, alone or with an attribute: a registry entry
# ("workbench.backends.triton"), importlib.import_module's argument, `python -m`'s module, "pkg.mod:attr".
MODULE_STRING = re.compile(r"(?:kernels|workbench|ci)(?:\.\w+)+(?::[\w.]+)?")


def string_imports(path: Path, root: Path, launches: bool = True) -> Iterator[tuple[int, str]]:
    """(line, module) of every string that imports an internal module by name at run time: the argument
    of ``import_module`` / ``__import__``, a registry's ``("pkg.mod", "Attr")`` pair, a ``"pkg.mod:attr"``
    entry; with ``launches`` also the module a ``[..., "-m", "pkg.mod", ...]`` command starts."""
    for node, parent in _module_strings(parse(path)):
        named = ":" in node.value
        if isinstance(parent, ast.Call) and node in parent.args:
            fn = parent.func
            named = named or getattr(fn, "attr", getattr(fn, "id", None)) in ("import_module", "__import__")
        elif isinstance(parent, ast.Tuple | ast.List):
            items = parent.elts
            i = items.index(node)
            after = items[i + 1] if i + 1 < len(items) else None
            before = items[i - 1] if i else None
            is_str = lambda n: isinstance(n, ast.Constant) and isinstance(n.value, str)  # noqa: E731
            pair = is_str(after) and after.value.isidentifier() and len(items) == 2
            launch = is_str(before) and before.value == "-m"
            named = named or pair or (launches and launch)
        if not named:
            continue
        name = node.value.partition(":")[0]
        while name and not is_module(name, root):
            name = name.rpartition(".")[0]  # "pkg.mod.Class" names the module pkg.mod
        yield node.lineno, name or node.value


@functools.lru_cache(maxsize=4096)
def _module_strings(tree: ast.Module) -> tuple[tuple[ast.Constant, ast.AST | None], ...]:
    """(node, parent) of every string constant in the tree that reads as an internal module's name."""
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    return tuple(
        (node, parents.get(id(node)))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.fullmatch(node.value)
    )


# Code that runs inside a release's interpreter (its own Python, sglang's dependencies, no workbench):
# the replay driver (a package launched by `python -c`) and the real runtime's rank script with the
# files it imports as siblings (bare `import shims`), and the kernel set-up of a release's Jupyter kernel.
IN_RELEASE_PACKAGES = ("workbench.upstream.replay.wb_driver", "workbench.upstream.in_release")
IN_RELEASE_FOLDERS = ("workbench/upstream/runtime", "workbench/upstream/runtime/probes")
IN_RELEASE_MARK = re.compile(
    r"no workbench import|imports no workbench|never imported by the workbench|runs inside the (?:replay|release's) "
    r"environment",
    re.I,
)


def _marked(path: Path, root: Path) -> bool:
    name = module_name(path, root)
    if any(name == p or name.startswith(p + ".") for p in IN_RELEASE_PACKAGES):
        return True
    if str(path.parent.relative_to(root)) not in IN_RELEASE_FOLDERS or path.name == "__init__.py":
        return False
    return bool(IN_RELEASE_MARK.search(ast.get_docstring(parse(path)) or ""))


def in_release_modules(root: Path) -> set[str]:
    """The modules that run inside a release: the driver and in-release packages, the runtime files whose
    docstring says so, and every file those import relatively (``from ..in_release import shims``, which
    resolves under the release process's alias) or as a script's sibling (bare ``import shims``)."""
    by_name = {module_name(p, root): p for p in project_files(root)}
    inside = {name for name, p in by_name.items() if _marked(p, root)}
    todo = list(inside)
    while todo:
        path = by_name[todo.pop()]
        for _, sibling in [*sibling_imports(path, root), *relative_imports(path, root)]:
            if sibling not in inside and sibling in by_name:
                inside.add(sibling)
                todo.append(sibling)
    return inside


def in_release(path: Path, root: Path) -> bool:
    return module_name(path, root) in in_release_modules(root)


def relative_imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of a file's relative imports, resolved to the module (or its package)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            for a in node.names:
                yield node.lineno, f"{base}.{a.name}" if is_module(f"{base}.{a.name}", root) else base


def sibling_imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of a file's bare imports of its siblings (``import shims`` run as a script's
    neighbour), resolved to the sibling's module."""
    package = module_name(path, root).rpartition(".")[0]
    for line, target, _ in runtime_imports(path, root):
        head = target.split(".")[0]
        if head not in INTERNAL and (path.parent / f"{head}.py").exists():
            yield line, f"{package}.{head}"


def in_release_imports(root: Path) -> list[str]:
    """Imports of workbench code by code that runs inside a release, other than in-release code."""
    inside = in_release_modules(root)
    found = []
    for path in project_files(root):
        if module_name(path, root) not in inside:
            continue
        targets = [(line, t) for line, t, _ in runtime_imports(path, root) if t.split(".")[0] in INTERNAL]
        for line, target in [*targets, *sibling_imports(path, root), *string_imports(path, root)]:
            while target and not is_module(target, root):
                target = target.rpartition(".")[0]
            if target not in inside:
                found.append(f"{path.relative_to(root)}:{line} imports {target}")
    return found


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
    inside = in_release_modules(root)
    for path in project_files(root):
        deps = graph.setdefault(module_name(path, root), set())
        edges = [(line, t) for line, t, _ in runtime_imports(path, root)]
        edges += list(string_imports(path, root, launches=False))  # a launched module is another process
        if module_name(path, root) in inside:
            edges += list(sibling_imports(path, root))
        for _, target in edges:
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
    tree = parse(path)
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
        edges = [(line, t) for line, t, _ in runtime_imports(path, root)] + list(string_imports(path, root))
        for line, target in edges:
            if target.split(".")[0] not in INTERNAL or target == "workbench":
                continue
            if layer_of(target) > layer_of(src):
                found.append(f"{path.relative_to(root)}:{line} imports {target}")
    return found


def unresolved_imports(root: Path) -> list[str]:
    """Internal imports naming a module that does not exist (a relative import left behind by a move)."""
    found = []
    for path in project_files(root):
        edges = [(line, t) for line, t, _ in runtime_imports(path, root)] + list(string_imports(path, root))
        for line, target in edges:
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
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and HTML_TAG.search(node.value):
            found.append(f"{path.relative_to(root)}:{node.lineno} writes HTML {HTML_TAG.search(node.value).group(0)!r}")
    return found
