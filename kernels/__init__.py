"""Triton kernels of the `triton` backend, each with its launcher and its torch reference.

Importing this package has no effect: ``workbench_kernels.setup()`` (called by the entry points) picks
Triton's interpreter on a machine without a CUDA GPU, and the kernel modules load on first use,
after it (see ``workbench_kernels.triton_setup``). No public function falls back to torch; the ``*_ref``
functions are the torch references the kernels are tested against.
"""

from __future__ import annotations

import importlib
from typing import Any

from .triton_setup import interpreted, kernel_label, setup

_WHERE = {
    "decode_attention": ("decode_attention_fwd", "decode_attention_ref", "get_num_kv_splits"),
    "extend_attention": ("extend_attention_fwd", "extend_attention_ref"),
    "kv_indices": ("build_kv_indices", "build_kv_indices_ref"),
    "spec_helpers": (
        "assign_req_to_token_pool",
        "assign_req_to_token_pool_ref",
        "draft_extend_positions_and_bonus",
        "draft_extend_positions_and_bonus_ref",
    ),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = ["interpreted", "kernel_label", "setup", *_WHERE, *_MODULE_OF]


def __getattr__(name: str) -> Any:
    """The kernel modules and their functions, loaded on first use (after ``setup()``)."""
    if name in _WHERE:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
