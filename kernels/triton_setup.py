"""Where the kernels run: Triton's interpreter for CPU tensors, compiled Triton for CUDA tensors.

``setup(device)`` makes the choice, once per process: entry points (CLI, ``reproduce``, DP
rank processes, benchmarks, the test session) call it first with the run's device. Importing
``kernels`` has no effect; a kernel module gets ``triton`` from here (``from .runtime import tl,
triton``), which runs ``setup()`` (for CPU tensors) if no entry point did, so the workbench's own
import order never matters. Triton reads ``TRITON_INTERPRET`` while importing its language
library, so a ``triton`` imported by someone else before set-up, without the variable, cannot
serve CPU tensors: ``setup()`` says so. The kernels never fall back to torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

_STATE: dict = {"interpreted": None}  # set by setup()
_FALSE = ("", "0", "false", "off", "no")


def setup(device: str = "cpu") -> bool:
    """Choose where the kernels run, once per process (later calls return the first choice);
    returns True for the interpreter.

    ``device`` is where the engine will put its tensors. ``"cpu"``: Triton's interpreter, even on
    a machine with a GPU (sets ``TRITON_INTERPRET=1`` unless set, before importing triton).
    ``"cuda"``: compiled Triton, which needs a CUDA GPU. Raises RuntimeError, naming the fix, when
    the choice cannot be made: no GPU for ``"cuda"``, the interpreter switched off for ``"cpu"``,
    or triton imported earlier (its language library was built for the compiler).
    """
    if _STATE["interpreted"] is not None:
        return _STATE["interpreted"]
    if device not in ("cpu", "cuda"):
        raise ValueError(f"invalid device {device!r}; valid: cpu, cuda")
    flag = os.environ.get("TRITON_INTERPRET")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' asked for, but no CUDA GPU is visible; run with device 'cpu'")
    else:
        if "triton" in sys.modules and flag is None:
            raise RuntimeError(
                "triton was imported before workbench_kernels.setup() without TRITON_INTERPRET, so its language "
                "library was built for the compiler and the Triton kernels cannot run on CPU tensors. Call "
                "workbench_kernels.setup() before importing triton, or set TRITON_INTERPRET=1."
            )
        os.environ.setdefault("TRITON_INTERPRET", "1")
        if os.environ["TRITON_INTERPRET"].strip().lower() in _FALSE:
            raise RuntimeError(
                f"device 'cpu' and TRITON_INTERPRET={flag!r}: the Triton kernels run on CPU tensors only in "
                "Triton's interpreter. Unset it, or set TRITON_INTERPRET=1."
            )
    import triton

    _STATE["interpreted"] = bool(triton.knobs.runtime.interpret)
    return _STATE["interpreted"]


def __getattr__(name: str) -> Any:
    """``triton`` and ``triton.language`` for the kernel modules, after ``setup()``."""
    if name in ("triton", "tl"):
        setup()
        import triton
        import triton.language as tl

        return triton if name == "triton" else tl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def interpreted() -> bool:
    """True when the kernels run in Triton's interpreter (CPU), False when compiled."""
    return setup()


def kernel_label() -> str:
    """How the kernels execute, for result rows and plot labels."""
    if interpreted():
        return "triton (interpreter, CPU)"
    return f"triton (compiled, {torch.cuda.get_device_name()})"


_F = TypeVar("_F", bound=Callable[..., None])


@functools.cache
def _blas_thread_setter() -> Callable[[int], int] | None:
    """openblas_set_num_threads_local of the OpenBLAS a numpy wheel vendors, if there is one."""
    import numpy

    for path in glob.glob(os.path.join(os.path.dirname(numpy.__file__) + ".libs", "*openblas*")):
        try:
            setter = ctypes.CDLL(path).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        setter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
        return setter
    return None


@contextlib.contextmanager
def _single_threaded_blas() -> Iterator[None]:
    setter = _blas_thread_setter()
    previous = setter(1) if setter is not None else None
    try:
        yield
    finally:
        if setter is not None:
            setter(previous)


def launcher(fn: _F) -> _F:
    """Decorate a kernel launcher: in the interpreter, run it with numpy's OpenBLAS single-threaded.

    The interpreter runs tl.dot with np.matmul; OpenBLAS threads then fight torch's spinning
    OpenMP threads and a small tl.dot takes ~20 ms instead of ~0.3 ms. Only this thread's
    setting changes, and only for the launch. Compiled, the launch runs as is.
    """

    @functools.wraps(fn)
    def wrapped(*args: object, **kwargs: object) -> None:
        if not interpreted():
            return fn(*args, **kwargs)
        with _single_threaded_blas():
            fn(*args, **kwargs)

    return wrapped  # type: ignore[return-value]


def block_n() -> int:
    """Keys per inner-loop step: wide in the interpreter (per-op cost), GPU-friendly compiled."""
    return 256 if interpreted() else 64


def dot_dtype(dtype: torch.dtype) -> Any:
    """Operand dtype of tl.dot for ``dtype`` inputs.

    float32 in the interpreter: it stores bfloat16 as raw uint16 and np.matmul would multiply
    the bit patterns, so 16-bit operands are upcast there. Compiled, the input dtype itself.
    """
    import triton.language as tl

    tl_dtypes = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
    if dtype not in tl_dtypes:
        raise ValueError(f"unsupported dtype {dtype}; expected float32, bfloat16 or float16")
    return tl.float32 if interpreted() else tl_dtypes[dtype]


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: exact fp32 (no TF32) so float32 matches the torch reference."""
    return "ieee" if dtype == torch.float32 or interpreted() else "tf32"


def check_tensors(**tensors: torch.Tensor) -> None:
    """Raise ValueError unless all tensors share one device the kernels can reach."""
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        where = {name: str(t.device) for name, t in tensors.items()}
        raise ValueError(f"tensors on different devices: {where}")
    (device,) = devices or {torch.device("cpu")}
    if not interpreted() and device.type != "cuda":
        raise ValueError(f"compiled Triton kernels need CUDA tensors, got {device}")


def next_pow2(n: int) -> int:
    """The smallest power of two >= max(n, 1)."""
    return 1 << (max(int(n), 1) - 1).bit_length()


def shape_error(name: str, tensor: torch.Tensor, expected: tuple[object, ...]) -> ValueError:
    return ValueError(f"{name}: expected shape {expected}, got {tuple(tensor.shape)}")
