"""``device="cuda"`` put on the CPU and ``pin_memory`` dropped: the one device redirect of the code run
inside a release, used by the replay driver and by the real runtime's shims.

Some release code hard-codes the device (0.5.14's ``EagleVerifyInput.create_idle_input`` builds its
empty tensors with ``device="cuda"``; DP attention stages its token counts in pinned host memory); a
CPU-only torch raises on both. ``CudaToCpu`` wraps the torch functions and ``Tensor`` methods it is
given: a CUDA ``device`` (keyword, or ``Tensor.to``'s first argument) becomes ``cpu``, a true
``pin_memory`` becomes False, ``Tensor.cuda`` / ``Tensor.pin_memory`` return the tensor itself.
Used as a context (the replays: only while a case builds and runs) it puts torch back on exit;
``install()`` keeps it for the life of the process (a real-runtime rank, its kernel). What it
redirected is kept by name in ``redirected`` (a replay says so in its ``stand_ins``).
"""

from __future__ import annotations

import torch

# What a replay redirects: torch's tensor factories and the Tensor methods that name a device.
FUNCTIONS = (
    "tensor",
    "as_tensor",
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand",
    "randn",
    "randint",
    "randperm",
    "linspace",
    "eye",
)
METHODS = ("to", "cuda", "pin_memory", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor")
_ABSENT = object()


def _is_cuda(dev: object) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, str):
        return dev.split(":")[0] == "cuda"
    return False


class CudaToCpu:
    """The redirect over torch's ``functions`` and ``Tensor`` ``methods`` (module docstring); ``device``
    and ``pin_memory`` say which of the two changes it makes."""

    def __init__(
        self,
        functions: tuple[str, ...] = FUNCTIONS,
        methods: tuple[str, ...] = METHODS,
        device: bool = True,
        pin_memory: bool = True,
    ) -> None:
        unknown = [f"torch.{n}" for n in functions if not callable(getattr(torch, n, None))]
        unknown += [f"torch.Tensor.{n}" for n in methods if not callable(getattr(torch.Tensor, n, None))]
        if unknown:
            raise ValueError(f"cannot redirect {unknown}: not a torch function or Tensor method")
        self.functions, self.methods = tuple(functions), tuple(methods)
        self.device, self.pin_memory = device, pin_memory
        self.redirected: set[str] = set()
        self._saved: list[tuple[object, str, object]] = []

    def _change(self, name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if self.device and _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
            self.redirected.add(name)
        if self.pin_memory and kwargs.get("pin_memory"):  # pinned host memory needs an accelerator's allocator
            kwargs["pin_memory"] = False
            self.redirected.add(f"{name}(pin_memory)")
        if self.device and name == "Tensor.to" and len(args) > 1 and _is_cuda(args[1]):
            self.redirected.add(name)
            args = (args[0], "cpu", *args[2:])
        return args, kwargs

    def _wrap(self, owner: object, name: str, label: str) -> None:
        original = getattr(owner, name)
        if (label == "Tensor.cuda" and self.device) or (label == "Tensor.pin_memory" and self.pin_memory):

            def wrapper(tensor, *args, _label=label, **kwargs):
                self.redirected.add(_label)
                return tensor

        else:

            def wrapper(*args, _original=original, _label=label, **kwargs):
                args, kwargs = self._change(_label, args, kwargs)
                return _original(*args, **kwargs)

        wrapper.__name__ = name
        self._saved.append((owner, name, vars(owner).get(name, _ABSENT) if isinstance(owner, type) else original))
        setattr(owner, name, wrapper)

    def install(self) -> CudaToCpu:
        """Wrap the functions and methods until ``restore`` (or for the life of the process)."""
        if self._saved:
            raise RuntimeError("CudaToCpu is installed already")
        for name in self.functions:
            self._wrap(torch, name, name)
        for name in self.methods:
            self._wrap(torch.Tensor, name, f"Tensor.{name}")
        return self

    def restore(self) -> None:
        """Put back what ``install`` wrapped."""
        for owner, name, original in reversed(self._saved):
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._saved.clear()

    def __enter__(self) -> CudaToCpu:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()
