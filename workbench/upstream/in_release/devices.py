"""``device="cuda"`` redirected to the CPU (and ``pin_memory`` dropped), so that the release's own
constructors run here.

Some idle-input constructors hard-code the device (0.5.14's ``EagleVerifyInput.create_idle_input``
builds its empty tensors with ``device="cuda"``). Inside ``cuda_to_cpu()`` every torch call that
names a CUDA device gets the CPU instead; each redirected call is counted, and a replay that used
the redirect says so (``stand_ins``).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


def _is_cuda(dev) -> bool:
    if isinstance(dev, torch.device):
        return dev.type == "cuda"
    if isinstance(dev, str):
        return dev.split(":")[0] == "cuda"
    return False


class CudaToCpu(TorchFunctionMode):
    """Rewrites a CUDA ``device`` argument to ``cpu``; ``Tensor.cuda()`` returns the tensor itself."""

    def __init__(self) -> None:
        super().__init__()
        self.redirected: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", str(func))
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = "cpu"
            self.redirected.append(name)
        if kwargs.get("pin_memory"):  # pinned host memory needs an accelerator's allocator
            kwargs["pin_memory"] = False
            self.redirected.append(f"{name}(pin_memory)")
        if name == "pin_memory" and args and isinstance(args[0], torch.Tensor):
            self.redirected.append("Tensor.pin_memory")
            return args[0]
        if name == "cuda" and args and isinstance(args[0], torch.Tensor):
            self.redirected.append("Tensor.cuda")
            return args[0]
        if name == "to" and len(args) > 1 and _is_cuda(args[1]):
            self.redirected.append("Tensor.to")
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)
