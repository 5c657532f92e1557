"""Device equivalences: where a release's CPU branch assumes the intel_amx attention backend, take the CUDA branch.

Runs inside the release environment (imports no workbench module). From 0.5.23 SGLang's CPU engine
(``SGLANG_USE_CPU_ENGINE=1``, ``is_cpu()`` true) assumes in code that is not under test that the CPU
attention backend is intel_amx. The real runtime runs the triton (or torch_native) backend on CPU, so there
the CPU branch asks for what only intel_amx provides. An equivalence makes one function take the other
branch of its ``_is_cpu`` test: the function is the release's own code object, run with a view of its
module's globals in which ``_is_cpu`` is False (every other name reads the live module). So the lines
that run are the release's own CUDA-branch lines, and the function's other code is unchanged.

An equivalence names its upstream function, the line(s) holding the test, the CPU and the CUDA
expressions as written there, and why the CUDA branch is the one for the chosen backend. ``apply``
checks, against the release's source, that the function reads ``_is_cpu`` once, in the anchored line
(one that reads it anywhere else is refused, never applied), and that it binds no global. None adds,
removes or changes a field of a spec input, a read in an attention backend, or the EAGLE worker's
control flow: the functions are the DP padding's fill value and the verify tree-mask mode's default.
"""

import ast
import importlib
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass

FLAG = "_is_cpu"


class EquivalenceError(RuntimeError):
    """A release's function does not have the shape an equivalence names (never applied then)."""


@dataclass(frozen=True)
class Equivalence:
    name: str
    module: str  # dotted module
    qualname: str  # function or Class.method
    anchor: str  # a fragment of the line that tests the flag, to find its line numbers in a release
    cpu_branch: str  # the expression taken on CPU, as the release writes it
    cuda_branch: str  # the expression taken on CUDA, as the release writes it
    why: str


EQUIVALENCES = (
    Equivalence(
        "dp-padding-fill-value",
        "sglang.srt.model_executor.forward_batch_info",
        "ForwardBatch._pad_inputs_to_size",
        "if _is_cpu",
        "model_runner.attn_backend.get_cpu_graph_seq_len_fill_value()",
        "model_runner.attn_backend.get_cuda_graph_seq_len_fill_value()",
        "DP attention pads an idle rank's batch and asks the attention backend for the padded rows' seq_len; on "
        "CPU it calls get_cpu_graph_seq_len_fill_value, which only intel_amx (and the hybrid linear backend) "
        "define, so the triton backend raises AttributeError. On CUDA the same line asks the chosen backend's "
        "get_cuda_graph_seq_len_fill_value (triton: 1).",
    ),
    Equivalence(
        "verify-tree-mask-mode",
        "sglang.srt.speculative.eagle_utils",
        "default_tree_mask_mode",
        "if _is_cpu else",
        "TreeMaskMode.QLEN_ONLY",
        "TreeMaskMode.FULL_MASK",
        "the EAGLE worker's verify tree mask: on CPU QLEN_ONLY, the qlen x qlen mask intel_amx's verify kernel "
        "reads; the triton backend's kernels read the full mask (FULL_MASK, the CUDA branch), so with QLEN_ONLY "
        "the verify pass attends through a mask laid out for another kernel.",
    ),
)


class _CudaGlobals(dict):
    """A function's globals with ``_is_cpu`` False; every other name is read from the live module."""

    def __init__(self, module: types.ModuleType):
        super().__init__({FLAG: False, "__builtins__": module.__dict__["__builtins__"], "__name__": module.__name__})
        self._module = module

    def __missing__(self, key: str):
        return self._module.__dict__[key]


def _resolve(module: types.ModuleType, qualname: str) -> tuple:
    owner, name = module, qualname
    if "." in qualname:
        cls_name, name = qualname.split(".", 1)
        owner = getattr(module, cls_name)
    return owner, name, inspect.getattr_static(owner, name)


def check_shape(eq: Equivalence, func: types.FunctionType) -> list:
    """The release lines (``file:first-last``) of each statement in ``func`` that tests the flag;
    EquivalenceError if the function reads it other than once in the anchored line, binds a global, or
    does not write the two branches as ``eq`` names them."""
    lines, start = inspect.getsourcelines(func)
    src = "".join(lines)
    tree = ast.parse(textwrap.dedent(src))
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == FLAG]
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(tree)):
        raise EquivalenceError(f"{eq.qualname} binds a global or nonlocal name; a globals view would hide it")
    flag_lines = sorted({start + n.lineno - 1 for n in uses})
    anchored = [start + i for i, line in enumerate(lines) if eq.anchor in line]
    if len(uses) != 1 or flag_lines != anchored:
        raise EquivalenceError(
            f"{eq.qualname} reads {FLAG} {len(uses)} time(s), at lines {flag_lines}; the equivalence names one "
            f"test, {eq.anchor!r}, at {anchored}"
        )
    flat = "".join(src.split())
    for branch in (eq.cpu_branch, eq.cuda_branch):
        if "".join(branch.split()) not in flat:
            raise EquivalenceError(f"{eq.qualname} does not write {branch!r}")
    path = inspect.getsourcefile(func) or "?"
    rel = "sglang/" + path.split("/sglang/", 1)[1] if "/sglang/" in path else path
    spans = []
    for stmt in ast.walk(tree):  # the innermost statement holding each test: the line's whole branch
        if isinstance(stmt, ast.stmt) and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = [n for n in ast.walk(stmt) if n in uses]
            if inner and not any(
                isinstance(c, ast.stmt) and any(n in uses for n in ast.walk(c)) for c in ast.iter_child_nodes(stmt)
            ):
                spans.append((start + stmt.lineno - 1, start + stmt.end_lineno - 1))
    return [f"{rel}:{a}" if a == b else f"{rel}:{a}-{b}" for a, b in sorted(set(spans))]


def on_cuda_branch(func: types.FunctionType, module: types.ModuleType) -> types.FunctionType:
    """``func``'s own code object with ``_is_cpu`` False in its globals (a live view of ``module``)."""
    new = types.FunctionType(func.__code__, _CudaGlobals(module), func.__name__, func.__defaults__, func.__closure__)
    new.__kwdefaults__ = func.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = func.__qualname__, func.__module__, func.__doc__
    new.__dict__.update(func.__dict__)
    new.__wb_equivalence__ = True
    return new


def _rebind(original, new) -> list:
    """Every loaded sglang module that imported ``original`` by name gets ``new``; their names."""
    out = []
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("sglang.") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                setattr(mod, attr, new)
                out.append(f"{mod_name}.{attr}")
    return out


def apply(version: str) -> list:
    """Install every equivalence whose function this release has; return their records."""
    out = []
    for eq in EQUIVALENCES:
        entry = {
            "name": eq.name,
            "function": f"{eq.module}.{eq.qualname}",
            "module": eq.module,
            "qualname": eq.qualname,
            "cpu_branch": eq.cpu_branch,
            "cuda_branch": eq.cuda_branch,
            "why": eq.why,
            "installed": False,
        }
        try:
            module = importlib.import_module(eq.module)
            owner, name, func = _resolve(module, eq.qualname)
        except (ImportError, AttributeError):
            entry["reason"] = f"not needed in sglang {version}: no {eq.module}.{eq.qualname}"
            out.append(entry)
            continue
        if FLAG not in inspect.getsource(func):
            entry["reason"] = f"not needed in sglang {version}: {eq.qualname} has no {FLAG} branch"
            out.append(entry)
            continue
        try:
            entry["upstream"] = check_shape(eq, func)
        except EquivalenceError as exc:
            entry["reason"] = f"not applied in sglang {version}: {exc}"
            out.append(entry)
            continue
        new = on_cuda_branch(func, module)
        setattr(owner, name, new)
        entry["rebound"] = _rebind(func, new) if owner is module else []
        entry["installed"] = True
        out.append(entry)
    return out


def touched(applied: list) -> dict:
    """{"module:qualname": equivalence} for every function an installed equivalence replaced."""
    return {f"{a['module']}:{a['qualname']}": a["name"] for a in applied if a["installed"]}


def changes(applied: list) -> list:
    """Each change an installed equivalence made, named as the live shim guard names it (module, qualname):
    the release's own function object replaced by one with the same code and ``_is_cpu`` False."""
    return [
        {
            "equivalence": a["name"],
            "module": a["module"],
            "name": a["qualname"],
            "change": f"the release's own code run with {FLAG} False (its CUDA branch: {a['cuda_branch']})",
        }
        for a in applied
        if a["installed"]
    ]
