"""Versions of the ``sgl_kernel`` CPU ops that SGLang 0.5.23 imports at module import (no workbench import).

SGLang's CPU engine calls these from the CPU/AMX build of sgl_kernel, which is not on PyPI for this
torch. Each function here keeps the op's signature and runs what the calling function does on its
other branch: the same module's own Triton kernel (in the Triton interpreter), launched with that
branch's arguments. ``copy_all_layer_kv_cache_cpu`` is the exception: its Triton kernel loads raw
data pointers, which the interpreter cannot follow, so the same gather-then-scatter of bytes is done
with ctypes on the pointers it is given. ``rotate_input_ids_cpu`` (multi-layer EAGLE only) raises.
"""

import ctypes

from .shim_support import stub


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    from sglang.srt.mem_cache import allocation

    bs = req_pool_indices.shape[0]
    allocation.assign_req_to_token_pool[(bs,)](
        req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len, _pow2(bs)
    )


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    from sglang.kernels.ops.speculative import eagle

    eagle.fill_bonus_tokens[(accept_lens.shape[0],)](accept_tokens, accept_lens, bonus_tokens, accept_stride)


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    from sglang.kernels.ops.speculative import eagle

    size = accept_index.numel()
    eagle.fill_accept_out_cache_loc[(size,)](accept_index, out_cache_loc, accept_out_cache_loc, _pow2(size))


def build_tree_kernel_efficient_cpu(*args):
    from sglang.kernels.ops.speculative import spec_tree

    spec_tree.sgl_build_tree_kernel_triton(*args)


def verify_tree_greedy_cpu(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
):
    from sglang.kernels.ops.speculative import spec_tree

    spec_tree.verify_tree_greedy_triton(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_token_num,
        candidates=candidates,
        retrieve_index=retrive_index,
        retrieve_next_token=retrive_next_token,
        retrieve_next_sibling=retrive_next_sibling,
        target_predict=target_predict,
    )


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk, num_cols
):
    from sglang.kernels.ops.speculative import cache_locs

    bs = seq_lens.shape[0]
    cache_locs.assign_draft_cache_locs_contiguous[(bs,)](
        req_pool_indices,
        req_to_token,
        seq_lens,
        out_cache_loc,
        pool_len,
        topk,
        num_cols,
        positions=None,
        mrope=None,
        BS=bs,
        WRITE_POSITIONS=False,
        WRITE_MROPE=False,
    )


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    from sglang.kernels.ops.speculative import cache_locs

    bs = req_pool_indices.shape[0]
    cache_locs.assign_extend_cache_locs[(bs,)](
        req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len, _pow2(bs)
    )


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """For each buffer b (address data_ptrs[b], row size strides[b] bytes): rows src_loc -> tgt_loc, all
    rows read before any is written (the Triton kernel's load-then-store, safe in place)."""
    locs = list(zip(src_loc.tolist(), tgt_loc.tolist(), strict=True))
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + s * stride, stride) for s, _ in locs]
        for (_, t), row in zip(locs, rows, strict=True):
            ctypes.memmove(base + t * stride, row, stride)


OPS = {
    name: globals()[name]
    for name in (
        "assign_req_to_token_pool_cpu",
        "fill_bonus_tokens_cpu",
        "fill_accept_out_cache_loc_cpu",
        "build_tree_kernel_efficient_cpu",
        "verify_tree_greedy_cpu",
        "assign_draft_cache_locs_contiguous_cpu",
        "assign_extend_cache_locs_cpu",
        "copy_all_layer_kv_cache_cpu",
    )
}
OPS["rotate_input_ids_cpu"] = stub("sgl_kernel.rotate_input_ids_cpu")
