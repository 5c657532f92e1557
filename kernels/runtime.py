"""Where the kernels run: Triton's interpreter on a CPU-only machine, compiled Triton on a GPU.

Importing this module (``import kernels`` does) before anything imports ``triton`` is what
turns the interpreter on: ``TRITON_INTERPRET`` is read when a kernel is decorated, so it must
be set before the kernel modules load. The kernels never fall back to torch.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import sys
from typing import Callable, Iterator, Optional, Tuple, TypeVar

import torch

_HAS_GPU = torch.cuda.is_available()
_TRITON_PREIMPORTED = "triton" in sys.modules

if not _HAS_GPU and not _TRITON_PREIMPORTED and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402  (must follow the environment set-up above)
import triton.language as tl  # noqa: E402

_INTERPRETED = bool(triton.knobs.runtime.interpret)

if not _HAS_GPU and not _INTERPRETED:
    if _TRITON_PREIMPORTED:
        raise RuntimeError(
            "triton was imported before `kernels` on a machine without a CUDA GPU, so its "
            "interpreter is off and the Triton kernels cannot run. Import `kernels` first, "
            "or set TRITON_INTERPRET=1 before importing triton."
        )
    raise RuntimeError(
        "no CUDA GPU and TRITON_INTERPRET is set to a false value: the Triton kernels cannot "
        "run. Unset it, or set TRITON_INTERPRET=1."
    )


def interpreted() -> bool:
    """True when the kernels run in Triton's interpreter (CPU), False when compiled."""
    return _INTERPRETED


def kernel_label() -> str:
    """How the kernels execute, for result rows and plot labels."""
    if _INTERPRETED:
        return "triton (interpreter, CPU)"
    return f"triton (compiled, {torch.cuda.get_device_name()})"


_F = TypeVar("_F", bound=Callable[..., None])


@functools.lru_cache(maxsize=None)
def _blas_thread_setter() -> Optional[Callable[[int], int]]:
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
    setting changes, and only for the launch. Compiled, the launcher is returned unchanged.
    """
    if not _INTERPRETED:
        return fn

    @functools.wraps(fn)
    def wrapped(*args: object, **kwargs: object) -> None:
        with _single_threaded_blas():
            fn(*args, **kwargs)

    return wrapped  # type: ignore[return-value]


def block_n() -> int:
    """Keys per inner-loop step: wide in the interpreter (per-op cost), GPU-friendly compiled."""
    return 256 if _INTERPRETED else 64


_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def dot_dtype(dtype: torch.dtype) -> tl.dtype:
    """Operand dtype of tl.dot for ``dtype`` inputs.

    float32 in the interpreter: it stores bfloat16 as raw uint16 and np.matmul would multiply
    the bit patterns, so 16-bit operands are upcast there. Compiled, the input dtype itself.
    """
    if dtype not in _TL_DTYPES:
        raise ValueError(f"unsupported dtype {dtype}; expected float32, bfloat16 or float16")
    return tl.float32 if _INTERPRETED else _TL_DTYPES[dtype]


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot input precision: exact fp32 (no TF32) so float32 matches the torch reference."""
    return "ieee" if dtype == torch.float32 or _INTERPRETED else "tf32"


def check_tensors(**tensors: torch.Tensor) -> None:
    """Raise ValueError unless all tensors share one device the kernels can reach."""
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        where = {name: str(t.device) for name, t in tensors.items()}
        raise ValueError(f"tensors on different devices: {where}")
    (device,) = devices or {torch.device("cpu")}
    if not _INTERPRETED and device.type != "cuda":
        raise ValueError(f"compiled Triton kernels need CUDA tensors, got {device}")


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def shape_error(name: str, tensor: torch.Tensor, expected: Tuple[object, ...]) -> ValueError:
    return ValueError(f"{name}: expected shape {expected}, got {tuple(tensor.shape)}")
