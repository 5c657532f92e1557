"""What the CPU shims build on, inside the release environment (no workbench import).

``load_functions``: top-level definitions of an SGLang source file executed alone, so a shim can
use SGLang's own Triton or torch version of an op from another release's file. ``SglKernelFinder``:
the in-memory import stand-in for ``sgl_kernel``.
"""

import ast
import enum
import importlib.machinery
import types


class StandInError(NotImplementedError):
    """A name of the sgl_kernel import stand-in was called: the real op is not on this path."""


def load_functions(path: str, names: tuple) -> dict:
    """Top-level definitions ``names`` of the file ``path``, executed without the rest of it.

    Each definition keeps its file and line numbers (the other lines blanked), so tracebacks,
    ``inspect.getsource`` and Triton's JIT read the real file. Returns name -> object.
    """
    import torch
    import triton
    import triton.language as tl

    with open(path) as f:
        text = f.read()
    lines = text.splitlines()
    keep = [""] * len(lines)
    found = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            keep[start - 1 : node.end_lineno] = lines[start - 1 : node.end_lineno]
            found.add(node.name)
    missing = set(names) - found
    if missing:
        raise ImportError(f"{path} defines none of {sorted(missing)}")
    namespace = {"torch": torch, "triton": triton, "tl": tl, "IntEnum": enum.IntEnum, "__name__": "wb_sglang_ops"}
    exec(compile("\n".join(keep) + "\n", path, "exec"), namespace)  # noqa: S102 - SGLang's own source
    return {n: namespace[n] for n in names}


def stub(qualname: str):
    """A callable that raises StandInError naming ``qualname``."""

    def _stub(*args, **kwargs):
        raise StandInError(f"{qualname} is an eagle-workbench import stand-in; sgl_kernel is not installed")

    _stub.__name__ = qualname.rsplit(".", 1)[-1]
    return _stub


class SglKernelFinder:
    """Import stand-in for ``sgl_kernel`` (a meta path finder, in memory only).

    ``ops``: top-level names with a torch version; ``stubs``: submodule -> names that raise when
    called. Any other name or submodule is missing (ImportError), as without sgl_kernel, so
    SGLang's own try/except fallbacks behave as they would.
    """

    def __init__(self, ops: dict, stubs: dict):
        self.ops, self.stubs = ops, stubs

    def find_spec(self, name, path=None, target=None):
        if name == "sgl_kernel" or name in self.stubs:
            return importlib.machinery.ModuleSpec(name, self, is_package=name == "sgl_kernel")
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, "eagle-workbench import stand-in (not the real sgl_kernel)")
        module.WORKBENCH_STANDIN = True
        if spec.name == "sgl_kernel":
            module.__path__ = []
            module.__dict__.update(self.ops)
        for attr in self.stubs.get(spec.name, ()):
            setattr(module, attr, stub(f"{spec.name}.{attr}"))
        return module

    def exec_module(self, module):
        return None
