"""Triton kernels of the `triton` backend, each with its launcher and its torch reference.

Import this package before anything imports ``triton``: on a machine without a CUDA GPU it
switches Triton to its interpreter (see ``kernels.runtime``). No public function falls back
to torch; the ``*_ref`` functions are the torch references the kernels are tested against.
"""
from .runtime import interpreted, kernel_label  # first: sets TRITON_INTERPRET before triton loads
from .decode_attention import decode_attention_fwd, decode_attention_ref, get_num_kv_splits
from .extend_attention import extend_attention_fwd, extend_attention_ref
from .kv_indices import build_kv_indices, build_kv_indices_ref
from .spec_helpers import (
    assign_req_to_token_pool,
    assign_req_to_token_pool_ref,
    draft_extend_positions_and_bonus,
    draft_extend_positions_and_bonus_ref,
)

__all__ = [
    "interpreted", "kernel_label",
    "decode_attention_fwd", "decode_attention_ref", "get_num_kv_splits",
    "extend_attention_fwd", "extend_attention_ref",
    "build_kv_indices", "build_kv_indices_ref",
    "assign_req_to_token_pool", "assign_req_to_token_pool_ref",
    "draft_extend_positions_and_bonus", "draft_extend_positions_and_bonus_ref",
]
