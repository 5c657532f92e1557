"""Attention backends by name. Imports are lazy so an optional dependency never breaks import."""

from __future__ import annotations

import importlib

from workbench.backends.base import AttentionBackend, BackendContext
from workbench.backends.multi_step import MultiStepDraftBackend

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


__all__ = [
    "AttentionBackend",
    "BackendContext",
    "MultiStepDraftBackend",
    "backend_names",
    "create_backend",
    "get_backend_class",
]
