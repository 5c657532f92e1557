"""Extend / prefill attention: new query tokens over a cached prefix plus the new tokens.

One program per (request, kv head, block of query tokens). Its rows are (token, group head)
pairs, so the kv head's keys are loaded once for every query head of its group. Masks over
the new tokens: causal, or a custom boolean mask (EAGLE target-verify tree attention).
"""

from __future__ import annotations

import torch

from . import triton_setup
from .triton_setup import tl, triton  # after set-up: triton sees the interpreter choice


@triton.jit
def _extend_kernel(
    q_ptr,
    k_ext_ptr,
    v_ext_ptr,
    o_ptr,
    k_buf_ptr,
    v_buf_ptr,
    qo_indptr_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    mask_ptr,
    mask_indptr_ptr,
    sm_scale,
    stride_qt,
    stride_qh,
    stride_ket,
    stride_keh,
    stride_vet,
    stride_veh,
    stride_ot,
    stride_oh,
    stride_kbn,
    stride_kbh,
    stride_vbn,
    stride_vbh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_V: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    USE_CUSTOM_MASK: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    m_block = tl.program_id(2)
    q_start = tl.load(qo_indptr_ptr + b)
    q_len = tl.load(qo_indptr_ptr + b + 1) - q_start
    if m_block * BLOCK_M < q_len:
        prefix_start = tl.load(kv_indptr_ptr + b)
        prefix_len = tl.load(kv_indptr_ptr + b + 1) - prefix_start
        rows = tl.arange(0, BLOCK_M * BLOCK_G)  # (token, group head) pairs
        tok = m_block * BLOCK_M + rows // BLOCK_G  # query token index within the request
        grp = rows % BLOCK_G
        row_ok = (tok < q_len) & (grp < GROUP)
        heads = kv_head * GROUP + grp
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        offs_n = tl.arange(0, BLOCK_N)
        d_ok = offs_d[None, :] < HEAD_DIM
        dv_ok = offs_dv[None, :] < HEAD_DIM_V
        k_cache = k_buf_ptr + kv_head * stride_kbh + offs_d[None, :]  # this kv head's columns
        v_cache = v_buf_ptr + kv_head * stride_vbh + offs_dv[None, :]
        k_ext = k_ext_ptr + kv_head * stride_keh + offs_d[None, :]
        v_ext = v_ext_ptr + kv_head * stride_veh + offs_dv[None, :]
        q = tl.load(
            q_ptr + (q_start + tok)[:, None].to(tl.int64) * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
            mask=row_ok[:, None] & d_ok,
            other=0.0,
        ).to(DOT_DTYPE)
        m_i = tl.full([BLOCK_M * BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M * BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_M * BLOCK_G, BLOCK_DV], tl.float32)
        mask_row = tok.to(tl.int64) * (prefix_len + q_len)  # custom-mask offset of each row
        if USE_CUSTOM_MASK:
            mask_row = mask_row + tl.load(mask_indptr_ptr + b)
        kv_end = prefix_len + q_len
        if IS_CAUSAL:  # keys past this block's last token are masked for all its rows
            kv_end = prefix_len + tl.minimum(q_len, (m_block + 1) * BLOCK_M)
        # keys are [prefix from the cache | new tokens]; a block may straddle the two
        for start in range(0, kv_end, BLOCK_N):
            pos = start + offs_n
            in_prefix = pos < prefix_len
            in_new = (pos >= prefix_len) & (pos < prefix_len + q_len)
            slots = tl.load(kv_indices_ptr + prefix_start + pos, mask=in_prefix, other=0).to(tl.int64)
            new_tok = (q_start + pos - prefix_len).to(tl.int64)
            cached, new = in_prefix[:, None], in_new[:, None]
            k = tl.where(
                cached,
                tl.load(k_cache + slots[:, None] * stride_kbn, mask=cached & d_ok, other=0.0),
                tl.load(k_ext + new_tok[:, None] * stride_ket, mask=new & d_ok, other=0.0),
            )
            v = tl.where(
                cached,
                tl.load(v_cache + slots[:, None] * stride_vbn, mask=cached & dv_ok, other=0.0),
                tl.load(v_ext + new_tok[:, None] * stride_vet, mask=new & dv_ok, other=0.0),
            )
            qk = tl.dot(q, tl.trans(k.to(DOT_DTYPE)), input_precision=DOT_PRECISION) * sm_scale
            allowed = row_ok[:, None] & (in_prefix | in_new)[None, :]
            if USE_CUSTOM_MASK:
                custom = tl.load(mask_ptr + mask_row[:, None] + pos[None, :], mask=allowed, other=0)
                allowed = allowed & (custom != 0)
            if IS_CAUSAL:
                allowed = allowed & (in_prefix[None, :] | (pos[None, :] - prefix_len <= tok[:, None]))
            qk = tl.where(allowed, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing allowed yet
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(qk - m_safe[:, None])
            pv = tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=DOT_PRECISION)
            acc = acc * alpha[:, None] + pv
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(
            o_ptr + (q_start + tok)[:, None].to(tl.int64) * stride_ot + heads[:, None] * stride_oh + offs_dv[None, :],
            out.to(o_ptr.dtype.element_ty),
            mask=row_ok[:, None] & dv_ok,
        )


@triton_setup.launcher
def _launch_extend(
    *,
    q_extend,
    k_extend,
    v_extend,
    o_extend,
    k_buffer,
    v_buffer,
    qo_indptr,
    kv_indptr,
    kv_indices,
    custom_mask,
    mask_indptr,
    is_causal,
    max_len_extend,
    sm_scale,
) -> None:
    bs = qo_indptr.shape[0] - 1
    num_q_heads, head_dim = q_extend.shape[1], q_extend.shape[2]
    num_kv_heads, head_dim_v = k_buffer.shape[1], v_buffer.shape[2]
    group = num_q_heads // num_kv_heads
    block_g = triton_setup.next_pow2(group)
    block_m = max(min(64 // block_g, triton_setup.next_pow2(max_len_extend)), 16 // block_g, 1)  # rows >= 16
    use_mask = custom_mask is not None
    if use_mask and custom_mask.dtype == torch.bool:
        custom_mask = custom_mask.view(torch.uint8)
    _extend_kernel[(bs, num_kv_heads, triton.cdiv(max_len_extend, block_m))](
        q_extend,
        k_extend,
        v_extend,
        o_extend,
        k_buffer,
        v_buffer,
        qo_indptr,
        kv_indptr,
        kv_indices,
        custom_mask if use_mask else qo_indptr,
        mask_indptr if use_mask else qo_indptr,
        sm_scale,
        q_extend.stride(0),
        q_extend.stride(1),
        k_extend.stride(0),
        k_extend.stride(1),
        v_extend.stride(0),
        v_extend.stride(1),
        o_extend.stride(0),
        o_extend.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        GROUP=group,
        HEAD_DIM=head_dim,
        HEAD_DIM_V=head_dim_v,
        BLOCK_G=block_g,
        BLOCK_M=block_m,
        BLOCK_N=triton_setup.block_n(),
        BLOCK_D=max(16, triton_setup.next_pow2(head_dim)),
        BLOCK_DV=max(16, triton_setup.next_pow2(head_dim_v)),
        USE_CUSTOM_MASK=use_mask,
        IS_CAUSAL=bool(is_causal) and not use_mask,
        DOT_DTYPE=triton_setup.dot_dtype(q_extend.dtype),
        DOT_PRECISION=triton_setup.dot_precision(q_extend.dtype),
    )


def extend_attention_fwd(
    *,
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    custom_mask: torch.Tensor | None,
    mask_indptr: torch.Tensor | None,
    is_causal: bool,
    max_len_extend: int,
    sm_scale: float,
) -> None:
    """Attention of each request's new tokens over its cached prefix and its new tokens; writes o_extend.

    q_extend (Tq, Hq, D); k_extend (Tq, Hkv, D); v_extend (Tq, Hkv, Dv); o_extend (Tq, Hq, Dv);
    k_buffer (num_slots, Hkv, D); v_buffer (num_slots, Hkv, Dv); qo_indptr (bs+1,) int64 over
    the Tq tokens; kv_indptr (bs+1,) int64 and kv_indices (nnz,) give the prefix slots only.
    custom_mask (flat bool/uint8) or None: request i's block is q_len_i x (prefix_len_i + q_len_i),
    row-major from mask_indptr[i] ((bs+1,) int64); it takes precedence over is_causal.
    Without it, is_causal masks the new tokens causally (the prefix is always visible) and
    is_causal=False lets them see each other fully. max_len_extend >= every q_len_i (an int,
    so there is no device sync). Rows with nothing to attend to get zeros; bs 0 is a no-op.
    """
    num_tokens, num_q_heads, head_dim = q_extend.shape
    num_kv_heads, head_dim_v = k_buffer.shape[1], v_buffer.shape[2]
    if k_buffer.shape[2] != head_dim or num_q_heads % num_kv_heads:
        raise ValueError(f"q_extend {tuple(q_extend.shape)} does not fit k_buffer {tuple(k_buffer.shape)}")
    if tuple(k_extend.shape) != (num_tokens, num_kv_heads, head_dim):
        raise triton_setup.shape_error("k_extend", k_extend, (num_tokens, num_kv_heads, head_dim))
    if tuple(v_extend.shape) != (num_tokens, num_kv_heads, head_dim_v):
        raise triton_setup.shape_error("v_extend", v_extend, (num_tokens, num_kv_heads, head_dim_v))
    if tuple(o_extend.shape) != (num_tokens, num_q_heads, head_dim_v):
        raise triton_setup.shape_error("o_extend", o_extend, (num_tokens, num_q_heads, head_dim_v))
    if kv_indptr.shape != qo_indptr.shape:
        raise ValueError("qo_indptr and kv_indptr must both be (bs+1,)")
    if (custom_mask is None) != (mask_indptr is None):
        raise ValueError("custom_mask and mask_indptr go together")
    if any(t.stride(-1) != 1 for t in (q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer)):
        raise ValueError("q/k/v/o and the KV buffers need a contiguous last dimension")
    optional = {} if custom_mask is None else {"custom_mask": custom_mask, "mask_indptr": mask_indptr}
    triton_setup.check_tensors(
        q_extend=q_extend,
        k_extend=k_extend,
        v_extend=v_extend,
        o_extend=o_extend,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        **optional,
    )
    if qo_indptr.shape[0] <= 1 or max_len_extend <= 0:
        return
    _launch_extend(
        q_extend=q_extend,
        k_extend=k_extend,
        v_extend=v_extend,
        o_extend=o_extend,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        custom_mask=custom_mask,
        mask_indptr=mask_indptr,
        is_causal=is_causal,
        max_len_extend=max_len_extend,
        sm_scale=sm_scale,
    )


def extend_attention_ref(
    *,
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    custom_mask: torch.Tensor | None,
    mask_indptr: torch.Tensor | None,
    is_causal: bool,
    sm_scale: float,
) -> torch.Tensor:
    """Torch reference of extend_attention_fwd: returns o (Tq, Hq, Dv) in float32."""
    num_q_heads = q_extend.shape[1]
    group = num_q_heads // k_buffer.shape[1]
    device = q_extend.device
    o = torch.zeros(q_extend.shape[0], num_q_heads, v_buffer.shape[2], dtype=torch.float32, device=device)
    for i in range(qo_indptr.shape[0] - 1):
        q0, q1 = int(qo_indptr[i]), int(qo_indptr[i + 1])
        slots = kv_indices[int(kv_indptr[i]) : int(kv_indptr[i + 1])].long()
        n_prefix, n_new = slots.numel(), q1 - q0
        if n_new == 0:
            continue
        k = torch.cat([k_buffer[slots], k_extend[q0:q1]]).float().repeat_interleave(group, dim=1)
        v = torch.cat([v_buffer[slots], v_extend[q0:q1]]).float().repeat_interleave(group, dim=1)
        if custom_mask is not None:
            m0 = int(mask_indptr[i])
            allowed = custom_mask[m0 : m0 + n_new * (n_prefix + n_new)].view(n_new, n_prefix + n_new).bool()
        else:
            allowed = torch.ones(n_new, n_prefix + n_new, dtype=torch.bool, device=device)
            if is_causal:
                allowed[:, n_prefix:] = torch.ones(n_new, n_new, dtype=torch.bool, device=device).tril()
        scores = torch.einsum("thd,lhd->htl", q_extend[q0:q1].float(), k) * sm_scale
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).nan_to_num(0.0)
        o[q0:q1] = torch.einsum("htl,lhd->thd", probs, v)
    return o
