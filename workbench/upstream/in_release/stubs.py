"""GPU libraries stubbed at import, so that a backend that needs one can be built and traced on CPU.

``install({"flashinfer"})`` serves ``flashinfer`` and every ``flashinfer.*`` submodule from a stub
module whose every name is a ``LibraryStub``. While the backend is constructed (``STATE.armed`` is
False) a call into the library returns another stub standing in for what it built (a workspace
wrapper, a planner), and is counted; once armed (around ``init_forward_metadata``) the first call
raises ``GpuLibraryReached`` naming the library function and the sglang line that called it (reading
an attribute of a library object counts as using it). A
traced replay is therefore a statement about the metadata code path up to the first GPU call.

A case may ask for CPU stand-ins instead (``STATE.stand_in``, the oracle's cases): once armed, a call
returns another stub and goes on, each call listed in ``STATE.passed`` with its caller and which
arguments were None (a None handed to a real library may crash there; a stand-in cannot say). What
the code does after such a call is decided on a stub, never on what the library computes.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types


class GpuLibraryReached(RuntimeError):
    """The traced code called into a stubbed GPU library: the trace ends here."""

    def __init__(self, name: str, where: str | None):
        super().__init__(f"GPU library reached: {name} called at {where}")
        self.library_call, self.where = name, where


class _State:
    def __init__(self) -> None:
        self.armed = False
        self.built: list[str] = []  # library calls answered by a stand-in while not armed
        self.stubbed: set[str] = set()
        self.answered: set[str] = set()  # availability checks answered True for a stubbed library
        self.stand_in = False  # armed calls answered by a stub instead of raising GpuLibraryReached
        self.passed: list[str] = []  # the armed calls a stand-in answered: "name at line [None: args]"


STATE = _State()


def caller(depth: int = 2) -> str | None:
    """`sglang/...py:LINE` of the nearest sglang frame above this one (None when there is none)."""
    frame = sys._getframe(depth)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/sglang/" in path:
            return "sglang/" + path.rsplit("/sglang/", 1)[1] + f":{frame.f_lineno}"
        frame = frame.f_back
    return None


def _none_args(args: tuple, kwargs: dict) -> list[str]:
    return [str(i) for i, a in enumerate(args) if a is None] + [k for k, v in kwargs.items() if v is None]


def _stand_in(name: str, where: str | None, args: tuple = (), kwargs: dict | None = None) -> LibraryStub:
    """The armed use of a stubbed library under `STATE.stand_in`: listed, answered by a stub."""
    nones = _none_args(args, kwargs or {})
    STATE.passed.append(f"{name} at {where}" + (f" [None: {', '.join(nones)}]" if nones else ""))
    return LibraryStub(f"{name}()")


# Flags of a library object answered from the keyword its constructor was given (default when not
# given), not by a stub: a stub is truthy, and a flag answered True sends the code down a path the
# object was not built for (flashinfer's wrappers: `is_cuda_graph_enabled` is the constructor's
# `use_cuda_graph`, False unless a CUDA-graph wrapper is built).
FLAGS = {"is_cuda_graph_enabled": ("use_cuda_graph", False)}


class LibraryStub:
    """A name in a stubbed library: attributes are stubs; a call builds a stub, or raises when armed."""

    def __init__(self, name: str, kwargs: dict | None = None):
        object.__setattr__(self, "_wb_name", name)
        object.__setattr__(self, "_wb_kwargs", kwargs or {})

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        if STATE.armed and not STATE.stand_in:  # reading a library object's state is using the library too
            raise GpuLibraryReached(f"{self._wb_name}.{attr}", caller())
        if attr in FLAGS:
            key, default = FLAGS[attr]
            value = bool(self._wb_kwargs.get(key, default))
            STATE.answered.add(f"{self._wb_name}.{attr} = {value} (its constructor's {key})")
            return value
        return LibraryStub(f"{self._wb_name}.{attr}")

    def __setattr__(self, attr: str, value) -> None:
        object.__setattr__(self, attr, value)

    def __call__(self, *args, **kwargs):
        if STATE.armed and STATE.stand_in:
            return _stand_in(self._wb_name, caller(), args, kwargs)
        if STATE.armed:
            raise GpuLibraryReached(self._wb_name, caller())
        STATE.built.append(self._wb_name)
        return LibraryStub(f"{self._wb_name}()", kwargs)

    def __mro_entries__(self, bases):
        return (StubBase,)

    def _op(self, symbol: str):
        if STATE.armed and STATE.stand_in:
            return _stand_in(f"{self._wb_name} {symbol}", caller(3))
        if STATE.armed:
            raise GpuLibraryReached(f"{self._wb_name} {symbol}", caller(3))
        return LibraryStub(f"({self._wb_name} {symbol} ...)")

    def __truediv__(self, other):
        return self._op("/")

    def __add__(self, other):
        return self._op("+")

    def __mul__(self, other):
        return self._op("*")

    def __getitem__(self, key):
        return self._op("[]")

    def __repr__(self) -> str:
        return f"<stub {self._wb_name}>"


class StubBase:
    """What a class deriving from a stubbed library class derives from instead."""

    def __init__(self, *args, **kwargs):
        if STATE.armed and STATE.stand_in:
            _stand_in(type(self).__name__ + ".__init__", caller(), args, kwargs)
            return
        if STATE.armed:
            raise GpuLibraryReached(type(self).__name__ + ".__init__", caller())
        STATE.built.append(type(self).__name__)

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return LibraryStub(f"{type(self).__name__}.{attr}")


# dtype names libraries export for module-level constants (`torch.finfo(e4m3_dtype)` at import):
# answered with the torch dtype they name, recorded as a stand-in
DTYPES = {
    "e4m3_dtype": "float8_e4m3fn",
    "e5m2_dtype": "float8_e5m2",
    "fp8_dtype": "float8_e4m3fn",
    "fp8": "float8_e4m3fn",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
}


class StubModule(types.ModuleType):
    """A stubbed library module: a package whose every public name is a `LibraryStub` (a dtype
    name, `DTYPES`, is the torch dtype it names)."""

    def __init__(self, name: str):
        super().__init__(name, f"eagle-workbench stub of the GPU library module {name}")
        self.__path__: list[str] = []
        self.__version__ = "0.0.0+workbench.stub"

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        if attr in DTYPES:
            import torch

            STATE.answered.add(f"{self.__name__}.{attr} = torch.{DTYPES[attr]}")
            return getattr(torch, DTYPES[attr])
        return LibraryStub(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STATE.stubbed:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module) -> None:
        return None


_FINDER = _Finder()


def install(tops: set[str]) -> None:
    """Serve the top-level packages `tops` (and their submodules) from stubs from now on;
    ``torch.ops.<ns>`` names a torch op namespace (``torch.ops.sgl_kernel``), stubbed in place."""
    import torch

    for name in [t for t in tops if t.startswith("torch.ops.")]:
        setattr(torch.ops, name.split(".")[2], LibraryStub(name))
        STATE.stubbed.add(name)
    tops = {t for t in tops if not t.startswith("torch.ops.")} - STATE.stubbed
    if not tops:
        return
    STATE.stubbed |= set(tops)
    # attention modules imported before (without the library) took their no-library branches at
    # import: import them again against the stubs
    for name in [n for n in sys.modules if n.startswith("sglang.srt.layers.attention.")]:
        del sys.modules[name]
    for name in list(sys.modules):
        if name.split(".")[0] in tops and not isinstance(sys.modules[name], StubModule):
            del sys.modules[name]
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


class armed:
    """Context manager: inside it the first library call raises `GpuLibraryReached`."""

    def __enter__(self):
        STATE.armed = True
        return STATE

    def __exit__(self, *exc) -> None:
        STATE.armed = False
