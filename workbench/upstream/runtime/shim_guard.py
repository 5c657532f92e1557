"""The live check that no shim reached the code the crash is about (runs inside the replay environment).

Protected: the spec-input modules (``speculative/*_info*``), the attention backends
(``layers/attention/``), the DP padding (``forward_batch_info``, ``dp_attention``), the runner's idle
path (``model_runner``, ``model_executor/runner/``) and the scheduler's choice of spec input
(``managers/scheduler``, ``speculative/spec_info``, ``spec_registry``, ``base_spec_worker``, the EAGLE
workers). ``check`` reads every loaded protected module's source with ``ast`` and requires each
function and method it defines to be, on the live module or class, code from that same file (a
dataclass's generated methods, compiled from ``<string>``, excepted). A shim's replacement is code
from ``shims.py`` and shows up here. Imported names are not the module's own and are not checked.
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


def check_module(module) -> tuple:
    """(functions checked, violations) for one loaded module."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return 0, []
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return 0, []
    checked, bad = 0, []

    def expect(owner: str, name: str, obj) -> None:
        nonlocal checked
        where = _code_file(obj)
        if where is None:
            return
        checked += 1
        if where != path and where != "<string>":
            bad.append({"module": module.__name__, "name": f"{owner}{name}", "code_from": where})

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
    return checked, bad


def check() -> dict:
    """Every loaded protected module checked; ``violations`` must be empty."""
    modules = sorted(n for n in list(sys.modules) if n.startswith("sglang.") and protected(n))
    checked, violations = 0, []
    for name in modules:
        n, bad = check_module(sys.modules[name])
        checked += n
        violations += bad
    return {"modules": len(modules), "functions": checked, "violations": violations}
