"""Attention backends by name. Imports are lazy so an optional dependency never breaks import, and the
names (``backend_names``) load without torch, for the command line's parser."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.backends.base import AttentionBackend, BackendContext

_REGISTRY: dict[str, tuple[str, str]] = {
    "torch_native": ("workbench.backends.torch_native", "TorchNativeBackend"),
    "triton": ("workbench.backends.triton", "TritonBackend"),
    "flashinfer": ("workbench.backends.flashinfer", "FlashInferBackend"),
    "fa3": ("workbench.backends.fa3", "FlashAttention3Backend"),
}


def backend_names() -> list[str]:
    return list(_REGISTRY)


def get_backend_class(name: str) -> type:
    if name not in _REGISTRY:
        raise ValueError(f"unknown attention backend {name!r}; valid backends: {', '.join(_REGISTRY)}")
    module, cls = _REGISTRY[name]
    return getattr(importlib.import_module(module), cls)


def create_backend(name: str, ctx: BackendContext) -> AttentionBackend:
    return get_backend_class(name)(ctx)


_BASE = {
    "AttentionBackend": "workbench.backends.base",
    "BackendContext": "workbench.backends.base",
    "MultiStepDraftBackend": "workbench.backends.multi_step",
}


def __getattr__(name: str) -> Any:
    """The base classes, loaded on first use (they import torch)."""
    if name in _BASE:
        return getattr(importlib.import_module(_BASE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AttentionBackend",
    "BackendContext",
    "MultiStepDraftBackend",
    "backend_names",
    "create_backend",
    "get_backend_class",
]
