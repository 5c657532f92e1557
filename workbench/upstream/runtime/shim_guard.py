"""The live check that no shim reached the code the crash is about (runs inside the replay environment).

Protected: the spec-input modules (``speculative/*_info*``), the attention backends
(``layers/attention/``), the DP padding (``forward_batch_info``, ``dp_attention``), the runner's idle
path (``model_runner``, ``model_executor/runner/``) and the scheduler's choice of spec input
(``managers/scheduler``, ``speculative/spec_info``, ``spec_registry``, ``base_spec_worker``, the EAGLE
workers). ``check`` reads every loaded protected module's source with ``ast`` and requires each
function and method it defines to be, on the live module or class, code from that same file (a
dataclass's generated methods, compiled from ``<string>``, excepted). A shim's replacement is code
from ``shims.py`` and shows up here. Imported names are not the module's own and are not checked.
A method that a fix the run asked for replaced (``fixes.touched``, by name) is listed under
``fixed`` with its fix, not as a violation; code from anywhere else, ``fixes.py`` included, is one.
"""

import ast
import inspect
import re
import sys

PROTECTED = (
    r"^sglang\.srt\.speculative\.[^.]*_info[^.]*$",
    r"^sglang\.srt\.layers\.attention\.",
    r"^sglang\.srt\.model_executor\.forward_batch_info$",
    r"^sglang\.srt\.layers\.dp_attention$",
    r"^sglang\.srt\.model_executor\.model_runner$",
    r"^sglang\.srt\.model_executor\.runner\.",
    r"^sglang\.srt\.managers\.scheduler$",
    r"^sglang\.srt\.speculative\.(spec_info|spec_registry|base_spec_worker|eagle_worker[^.]*)$",
)


def protected(name: str) -> bool:
    """Whether module ``name`` is one no shim may touch."""
    return any(re.search(p, name) for p in PROTECTED)


def _code_file(obj):
    """The source file of a function-like object (through decorators and descriptors), or None."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    try:
        obj = inspect.unwrap(obj)
    except ValueError:
        return None
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "fn", None), "__code__", None)
    return code.co_filename if code is not None else None


def check_module(module, allowed: dict | None = None) -> tuple:
    """(functions checked, violations, fixed) for one loaded module; ``allowed``: {"module:Class.method":
    fix} replaced by a fix the run applied."""
    allowed = allowed or {}
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return 0, [], []
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return 0, [], []
    checked, bad, fixed = 0, [], []

    def expect(owner: str, name: str, obj) -> None:
        nonlocal checked
        where = _code_file(obj)
        if where is None:
            return
        checked += 1
        if where != path and where != "<string>":
            entry = {"module": module.__name__, "name": f"{owner}{name}", "code_from": where}
            fix = allowed.get(f"{module.__name__}:{owner}{name}")
            if fix is not None and where.endswith("fixes.py"):
                fixed.append({**entry, "fix": fix})
            else:
                bad.append(entry)

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and hasattr(module, node.name):
            expect("", node.name, getattr(module, node.name))
        elif isinstance(node, ast.ClassDef) and inspect.isclass(getattr(module, node.name, None)):
            cls = getattr(module, node.name)
            if getattr(cls, "__module__", None) != module.__name__:
                bad.append({"module": module.__name__, "name": node.name, "code_from": f"class from {cls.__module__}"})
                continue
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attr = cls.__dict__.get(item.name)
                    if attr is None:
                        bad.append(
                            {"module": module.__name__, "name": f"{node.name}.{item.name}", "code_from": "missing"}
                        )
                    else:
                        expect(f"{node.name}.", item.name, attr)
    return checked, bad, fixed


def check(allowed: dict | None = None) -> dict:
    """Every loaded protected module checked; ``violations`` must be empty. ``allowed``: the methods
    the run's fixes replaced (``fixes.touched``), reported under ``fixed``."""
    modules = sorted(n for n in list(sys.modules) if n.startswith("sglang.") and protected(n))
    checked, violations, fixed = 0, [], []
    for name in modules:
        n, bad, by_fix = check_module(sys.modules[name], allowed)
        checked += n
        violations += bad
        fixed += by_fix
    return {"modules": len(modules), "functions": checked, "violations": violations, "fixed": fixed}
