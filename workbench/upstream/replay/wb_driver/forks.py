"""Many edited trees replayed in one release interpreter: one forked child per job.

Entry point ``main()`` (target ``replay.wb_driver.forks``, started by ``replay/oracle_pool.py``). The
config's ``jobs`` each hold the edited files of one tree (``changes``: ``sglang/...py`` -> text) and
the cases to run on it. The parent imports the heavy third-party modules (``PRELOAD``: torch, triton,
transformers) and the release's modules the driver's set-up and the triton backend need
(``PRELOAD_SGLANG``), and records which sglang modules each loaded one imports when it is imported
(``imports_of``). For each job it forks a child that drops the loaded modules that import an edited
one, directly or not (``dependents``; packages stay), serves the job's edited files in place of the
release's (``Overlay``: same module names, same file paths, so tracebacks and the line watch name the
release's lines) and runs the ordinary driver (``main.main``) on the job's cases: the dropped modules
are imported again, with the job's files swapped in; the rest are the parent's, as loaded from the
release's sources. The parent waits for each child under the job's limit (killed past it) and writes
one record per job to the config's ``result_path``; each child writes its own driver result to the
job's ``result_path``.

What this saves over one process per edited tree: the interpreter start and the imports of everything
an edit does not reach (once per config instead of once per job), and the copy of the whole source
tree per job (the edited modules are compiled in memory and never written to disk).
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import time
import traceback

from ...in_release.result_channel import write

PRELOAD = ("torch", "triton", "transformers", "numpy")
# module-level registries the release's modules add themselves to when imported (a second add raises):
# dropped with a module that imports one, so the re-imported modules register into a new one
REGISTRIES = ("sglang.srt.utils.invariants",)
# the release's modules the driver's set-up and the triton backend import: loaded once in the parent;
# a child drops those that import an edited module, directly or not (`dependents`), and re-imports them
PRELOAD_SGLANG = (
    "sglang.srt.server_args",
    "sglang.srt.configs.model_config",
    "sglang.srt.distributed.parallel_state",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.model_executor.forward_batch_info",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.layers.attention.triton_backend",
)


class Overlay(importlib.abc.MetaPathFinder):
    """Serves the modules of `changes` (``sglang/...py`` -> source text) from that text, under the
    file path the release has for them (`root`/path)."""

    def __init__(self, root: str, changes: dict[str, str]):
        self.by_module: dict[str, tuple[str, str]] = {}
        for path, text in changes.items():
            if not path.endswith(".py") or text is None:
                raise ValueError(f"overlay: {path!r} is not an edited .py file (deleted files are not served)")
            if path.endswith("/__init__.py"):
                raise ValueError(f"overlay: {path!r}: package __init__ files are not served")
            self.by_module[path[:-3].replace("/", ".")] = (os.path.join(root, path), text)

    def find_spec(self, fullname, path, target=None):
        got = self.by_module.get(fullname)
        if got is None:
            return None
        filename, text = got
        return importlib.util.spec_from_file_location(fullname, filename, loader=_TextLoader(filename, text))


class _TextLoader(importlib.abc.SourceLoader):
    """A module's source from memory under its real file name; no bytecode is read or written."""

    def __init__(self, filename: str, text: str):
        self.filename, self.text = filename, text

    def get_filename(self, fullname: str) -> str:
        return self.filename

    def get_data(self, path: str) -> bytes:
        if path == self.filename:
            return self.text.encode()
        with open(path, "rb") as f:
            return f.read()


def _executed_imports(tree: ast.Module):
    """The import statements a module runs when it is imported: every one outside a function body
    (a function's import looks the module up when it is called, and finds the re-imported one)."""
    todo = list(tree.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            yield n
        elif isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            todo.extend(n.orelse)  # `if TYPE_CHECKING:` never runs
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt))


def imports_of(name: str, module) -> set[str]:
    """The sglang modules a loaded module imports when it is imported (its top level, class bodies,
    `if` / `try` blocks but `if TYPE_CHECKING:`: more than it may have run, never less), relative
    imports resolved."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return set()
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return set()
    pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out: set[str] = set()
    for n in _executed_imports(tree):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = pkg.split(".")
                head = ".".join(parts[: len(parts) - n.level + 1])
                base = f"{head}.{base}" if base else head
            out.add(base)
            out.update(f"{base}.{a.name}" for a in n.names)
    return {m for m in out if m == "sglang" or m.startswith("sglang.")}


def dependents(modules: dict, edited: set[str], graph: dict[str, set[str]]) -> set[str]:
    """The loaded sglang modules that import one of `edited` (module names), directly or through
    others, with the packages holding an edited module as an attribute; `graph`: name -> imports."""
    out = {m for m in edited if m in modules}
    changed = True
    while changed:
        changed = False
        for name, deps in graph.items():
            if name not in out and (deps & (out | edited)):
                out.add(name)
                changed = True
    return out


def _drop(names: set[str]) -> list[str]:
    """Forget the loaded modules `names` but packages, and the attributes their packages hold for them
    (`from pkg import mod` reads the attribute before it imports); the packages among `names` that
    have code, deepest first, to run again (`importlib.reload`: a package stays in place, its
    submodules' imports look it up, and what it binds must be the re-imported modules' objects)."""
    packages = []
    for name in names:
        if hasattr(sys.modules.get(name), "__path__"):
            if getattr(sys.modules[name], "__file__", None):
                packages.append(name)
            continue
        sys.modules.pop(name, None)
        parent, _, leaf = name.rpartition(".")
        holder = sys.modules.get(parent)
        if holder is not None and getattr(holder, leaf, None) is not None:
            try:
                delattr(holder, leaf)
            except AttributeError:
                pass
    return sorted(packages, key=lambda n: -n.count("."))


def _child(cfg: dict, job: dict, graph: dict[str, set[str]], fresh: bool) -> None:
    """In the forked child: the modules that see an edited file dropped (`fresh`: every sglang module,
    packages too), the overlay, then the ordinary driver on the job's cases."""
    sys.dont_write_bytecode = True
    edited = {p[:-3].replace("/", ".") for p in job.get("changes") or {}}
    if fresh:
        for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
            del sys.modules[name]
    else:
        dropped = dependents(sys.modules, edited, graph)
        # a registry an imported module adds itself to is emptied with it (re-imported), so the
        # modules imported again do not register twice
        dropped |= {r for r in REGISTRIES if r in sys.modules and any(r in graph.get(d, ()) for d in dropped)}
    packages = [] if fresh else _drop(dropped)
    sys.meta_path.insert(0, Overlay(cfg["src_root"], job.get("changes") or {}))
    for name in packages:
        importlib.reload(sys.modules[name])
    path = job["result_path"] + ".cfg.json"
    with open(path, "w") as f:
        json.dump({"cases": job["cases"], "src_root": cfg["src_root"], "result_path": job["result_path"]}, f)
    sys.argv = [sys.argv[0], path]
    from . import main as driver  # after the reloads above: the driver binds the fresh modules

    driver.main()


def _wait(pid: int, limit_s: float) -> tuple[str, int | None]:
    """('exited', status) or ('deadline', None) after killing the child (it stays in the parent's
    process group, so the supervisor's end of the parent ends it too: none is left running)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return "exited", status
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    return "deadline", None


def _fork(cfg: dict, job: dict, graph: dict[str, set[str]], fresh: bool) -> tuple[str, int | None]:
    """Run one job in a forked child under its limit; how it ended (`_wait`)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _child(cfg, job, graph, fresh)
        except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
            traceback.print_exc()
            code = 3
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return _wait(pid, float(job.get("limit_s") or cfg.get("job_limit_s") or 600))


def _setup_failed(path: str) -> bool:
    """Whether the child's driver result says its set-up (imports, server args, pools), not a case,
    failed, or there is none (the child failed before its driver ran)."""
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError):
        return True  # no result: the child failed before its driver wrote one
    return res.get("status") == "error" and res.get("stage") not in ("cases", "done")


def main() -> None:
    with open(sys.argv[1]) as fh:
        cfg = json.load(fh)
    preloaded = []
    for name in PRELOAD + PRELOAD_SGLANG:
        try:
            importlib.import_module(name)
            preloaded.append(name)
        except Exception:  # noqa: BLE001 - a module this release lacks or cannot import here: the child imports it
            pass
    graph = {n: imports_of(n, m) for n, m in list(sys.modules.items()) if n == "sglang" or n.startswith("sglang.")}
    records = []
    for job in cfg["jobs"]:
        start = time.monotonic()
        how, status = _fork(cfg, job, graph, fresh=False)
        rec = {"name": job["name"], "fresh": False}
        if how == "exited" and _setup_failed(job["result_path"]):
            # the set-up failed on the parent's modules (a registry REGISTRIES does not name?): the job
            # again with every sglang module imported afresh; its own failure, if any, stands
            how, status = _fork(cfg, job, graph, fresh=True)
            rec["fresh"] = True
        rec.update(
            ended=how,
            exit_code=os.waitstatus_to_exitcode(status) if status is not None else None,
            wall_s=round(time.monotonic() - start, 2),
        )
        records.append(rec)
        write(cfg["result_path"], {"status": "running", "preloaded": preloaded, "jobs": records})
    write(cfg["result_path"], {"status": "ok", "preloaded": preloaded, "jobs": records})
