"""Split-KV decode attention over a paged KV cache (kv_indptr / kv_indices), with GQA.

Stage 1: one program per (request, kv head, split) scores every query head of the kv head's
group against the split's keys and writes a partial output and its log-sum-exp into
caller-owned scratch. Stage 2: one program per (request, kv head) merges the splits.
"""

from __future__ import annotations

import torch

from . import triton_setup
from .triton_setup import tl, triton  # after set-up: triton sees the interpreter choice


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    logits_ptr,
    lse_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    num_kv_splits_ptr,
    max_kv_splits,
    sm_scale,
    stride_qb,
    stride_qh,
    stride_kn,
    stride_kh,
    stride_vn,
    stride_vh,
    stride_lb,
    stride_lh,
    stride_ls,
    stride_eb,
    stride_eh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    kv_start = tl.load(kv_indptr_ptr + b)
    seq_len = tl.load(kv_indptr_ptr + b + 1) - kv_start
    num_splits = tl.minimum(tl.maximum(tl.load(num_kv_splits_ptr + b), 1), max_kv_splits)
    split_len = tl.cdiv(seq_len, num_splits)
    lo = split * split_len
    hi = tl.minimum(lo + split_len, seq_len)
    if hi > lo:
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        offs_n = tl.arange(0, BLOCK_N)
        mask_h = offs_h < GROUP
        mask_d = offs_d < HEAD_DIM
        mask_dv = offs_dv < HEAD_DIM_V
        heads = kv_head * GROUP + offs_h
        q = tl.load(
            q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
            mask=mask_h[:, None] & mask_d[None, :],
            other=0.0,
        ).to(DOT_DTYPE)
        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
        for start in range(lo, hi, BLOCK_N):
            pos = start + offs_n
            mask_n = pos < hi
            slots = tl.load(kv_indices_ptr + kv_start + pos, mask=mask_n, other=0).to(tl.int64)
            k = tl.load(
                k_ptr + slots[:, None] * stride_kn + kv_head * stride_kh + offs_d[None, :],
                mask=mask_n[:, None] & mask_d[None, :],
                other=0.0,
            )
            qk = tl.dot(q, tl.trans(k.to(DOT_DTYPE)), input_precision=DOT_PRECISION) * sm_scale
            qk = tl.where(mask_n[None, :], qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(qk - m_new[:, None])
            v = tl.load(
                v_ptr + slots[:, None] * stride_vn + kv_head * stride_vh + offs_dv[None, :],
                mask=mask_n[:, None] & mask_dv[None, :],
                other=0.0,
            )
            pv = tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE), input_precision=DOT_PRECISION)
            acc = acc * alpha[:, None] + pv
            l_i = l_i * alpha + tl.sum(p, 1)
            m_i = m_new
        out = b * stride_lb + heads * stride_lh + split * stride_ls
        tl.store(
            logits_ptr + out[:, None] + offs_dv[None, :], acc / l_i[:, None], mask=mask_h[:, None] & mask_dv[None, :]
        )
        tl.store(lse_ptr + b * stride_eb + heads * stride_eh + split, m_i + tl.log(l_i), mask=mask_h)


@triton.jit
def _decode_merge_kernel(
    logits_ptr,
    lse_ptr,
    o_ptr,
    kv_indptr_ptr,
    num_kv_splits_ptr,
    max_kv_splits,
    stride_lb,
    stride_lh,
    stride_ls,
    stride_eb,
    stride_eh,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM_V: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    seq_len = tl.load(kv_indptr_ptr + b + 1) - tl.load(kv_indptr_ptr + b)
    num_splits = tl.minimum(tl.maximum(tl.load(num_kv_splits_ptr + b), 1), max_kv_splits)
    split_len = tl.cdiv(seq_len, num_splits)
    offs_h = tl.arange(0, BLOCK_H)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_h = offs_h < GROUP
    mask = mask_h[:, None] & (offs_dv[None, :] < HEAD_DIM_V)
    heads = kv_head * GROUP + offs_h
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    for split in range(0, num_splits):
        if split * split_len < seq_len:
            lse = tl.load(lse_ptr + b * stride_eb + heads * stride_eh + split, mask=mask_h, other=0.0)
            part = tl.load(
                logits_ptr + b * stride_lb + heads[:, None] * stride_lh + split * stride_ls + offs_dv[None, :],
                mask=mask,
                other=0.0,
            )
            m_new = tl.maximum(m_i, lse)
            alpha = tl.exp(m_i - m_new)
            w = tl.exp(lse - m_new)
            acc = acc * alpha[:, None] + w[:, None] * part
            l_i = l_i * alpha + w
            m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_dv[None, :], out.to(o_ptr.dtype.element_ty), mask=mask
    )


@triton_setup.launcher
def _launch_decode(
    *, q, k_buffer, v_buffer, o, kv_indptr, kv_indices, num_kv_splits, max_kv_splits, sm_scale, attn_logits, attn_lse
) -> None:
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads, head_dim_v = k_buffer.shape[1], v_buffer.shape[2]
    group = num_q_heads // num_kv_heads
    block_h = max(16, triton_setup.next_pow2(group))  # tl.dot needs M >= 16 when compiled
    block_dv = triton_setup.next_pow2(head_dim_v)
    _decode_split_kernel[(bs, num_kv_heads, max_kv_splits)](
        q,
        k_buffer,
        v_buffer,
        attn_logits,
        attn_lse,
        kv_indptr,
        kv_indices,
        num_kv_splits,
        max_kv_splits,
        sm_scale,
        q.stride(0),
        q.stride(1),
        k_buffer.stride(0),
        k_buffer.stride(1),
        v_buffer.stride(0),
        v_buffer.stride(1),
        attn_logits.stride(0),
        attn_logits.stride(1),
        attn_logits.stride(2),
        attn_lse.stride(0),
        attn_lse.stride(1),
        GROUP=group,
        HEAD_DIM=head_dim,
        HEAD_DIM_V=head_dim_v,
        BLOCK_H=block_h,
        BLOCK_D=max(16, triton_setup.next_pow2(head_dim)),
        BLOCK_DV=max(16, block_dv),
        BLOCK_N=triton_setup.block_n(),
        DOT_DTYPE=triton_setup.dot_dtype(q.dtype),
        DOT_PRECISION=triton_setup.dot_precision(q.dtype),
    )
    _decode_merge_kernel[(bs, num_kv_heads)](
        attn_logits,
        attn_lse,
        o,
        kv_indptr,
        num_kv_splits,
        max_kv_splits,
        attn_logits.stride(0),
        attn_logits.stride(1),
        attn_logits.stride(2),
        attn_lse.stride(0),
        attn_lse.stride(1),
        o.stride(0),
        o.stride(1),
        GROUP=group,
        HEAD_DIM_V=head_dim_v,
        BLOCK_H=triton_setup.next_pow2(group),
        BLOCK_DV=block_dv,
    )


def decode_attention_fwd(
    *,
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    o: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    num_kv_splits: torch.Tensor,
    max_kv_splits: int,
    sm_scale: float,
    attn_logits: torch.Tensor,
    attn_lse: torch.Tensor,
) -> None:
    """Decode attention of one new token per request over its cached keys; writes ``o``.

    q (bs, Hq, D); k_buffer (num_slots, Hkv, D); v_buffer (num_slots, Hkv, Dv); o (bs, Hq, Dv);
    kv_indptr (bs+1,) int64; kv_indices (nnz,) slot ids; num_kv_splits (bs,) int32, clamped to
    [1, max_kv_splits] in the kernel; scratch attn_logits (bs, Hq, max_kv_splits, Dv) float32 and
    attn_lse (bs, Hq, max_kv_splits) float32. Hq must be a multiple of Hkv. bs 0 is a no-op;
    a row with no keys gets zeros.
    """
    bs, num_q_heads, head_dim = q.shape
    num_kv_heads, head_dim_v = k_buffer.shape[1], v_buffer.shape[2]
    if k_buffer.shape[2] != head_dim or num_q_heads % num_kv_heads:
        raise ValueError(f"q {tuple(q.shape)} does not fit k_buffer {tuple(k_buffer.shape)}")
    if tuple(o.shape) != (bs, num_q_heads, head_dim_v):
        raise triton_setup.shape_error("o", o, (bs, num_q_heads, head_dim_v))
    if tuple(attn_logits.shape) != (bs, num_q_heads, max_kv_splits, head_dim_v):
        raise triton_setup.shape_error("attn_logits", attn_logits, (bs, num_q_heads, max_kv_splits, head_dim_v))
    if tuple(attn_lse.shape) != (bs, num_q_heads, max_kv_splits):
        raise triton_setup.shape_error("attn_lse", attn_lse, (bs, num_q_heads, max_kv_splits))
    if kv_indptr.shape[0] != bs + 1 or num_kv_splits.shape[0] != bs:
        raise ValueError(f"kv_indptr must be (bs+1,) and num_kv_splits (bs,) for bs={bs}")
    if attn_logits.stride(3) != 1 or attn_lse.stride(2) != 1 or q.stride(2) != 1 or o.stride(2) != 1:
        raise ValueError("q, o, attn_logits and attn_lse need a contiguous last dimension")
    if k_buffer.stride(2) != 1 or v_buffer.stride(2) != 1:
        raise ValueError("k_buffer and v_buffer need a contiguous last dimension")
    triton_setup.check_tensors(
        q=q,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        o=o,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        num_kv_splits=num_kv_splits,
        attn_logits=attn_logits,
        attn_lse=attn_lse,
    )
    if bs == 0:
        return
    _launch_decode(
        q=q,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        o=o,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        num_kv_splits=num_kv_splits,
        max_kv_splits=max_kv_splits,
        sm_scale=sm_scale,
        attn_logits=attn_logits,
        attn_lse=attn_lse,
    )


def get_num_kv_splits(seq_lens: torch.Tensor, max_kv_splits: int, *, tokens_per_split: int = 256) -> torch.Tensor:
    """(bs,) int32 splits per request: ceil(seq_len / tokens_per_split), clamped to [1, max_kv_splits].

    seq_lens (bs,) on the kernels' device; bs 0 gives an empty tensor (no division by bs).
    """
    if max_kv_splits < 1 or tokens_per_split < 1:
        raise ValueError("max_kv_splits and tokens_per_split must be >= 1")
    lens = seq_lens.to(torch.int64)
    splits = torch.div(lens + tokens_per_split - 1, tokens_per_split, rounding_mode="floor")
    return splits.clamp(1, max_kv_splits).to(torch.int32)


def decode_attention_ref(
    *,
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
) -> torch.Tensor:
    """Torch reference of decode_attention_fwd: returns o (bs, Hq, Dv) in float32."""
    bs, num_q_heads, _ = q.shape
    group = num_q_heads // k_buffer.shape[1]
    o = torch.zeros(bs, num_q_heads, v_buffer.shape[2], dtype=torch.float32, device=q.device)
    for i in range(bs):
        slots = kv_indices[int(kv_indptr[i]) : int(kv_indptr[i + 1])].long()
        if slots.numel() == 0:
            continue
        k = k_buffer[slots].float().repeat_interleave(group, dim=1)  # (L, Hq, D)
        v = v_buffer[slots].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,lhd->hl", q[i].float(), k) * sm_scale
        o[i] = torch.einsum("hl,lhd->hd", scores.softmax(dim=-1), v)
    return o
