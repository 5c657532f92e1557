"""Decode attention: the Triton kernel vs a torch baseline (per-request gather + SDPA).

Reports achieved bandwidth as bytes of K and V read per second and, on a GPU with a known
peak, the fraction of it. On a CPU-only machine the kernel runs in Triton's interpreter: the
timings then measure the interpreter, not the kernel, and the script says so.

    python benchmarks/bench_decode_attention.py [--repeats N] [--peak-gbps X]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

import workbench_kernels

PEAK_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}
GPU_SHAPES = [
    (1, 4096, 32, 8, 128),
    (16, 2048, 32, 8, 128),
    (64, 1024, 32, 8, 128),
    (32, 4096, 32, 4, 80),
    (128, 512, 64, 8, 64),
]
CPU_SHAPES = [(1, 512, 8, 2, 64), (4, 1024, 8, 2, 64), (8, 256, 16, 4, 80)]
MAX_KV_SPLITS = 8
Shape = tuple[int, int, int, int, int]  # (bs, seq_len, Hq, Hkv, head_dim)


def _timed(fn: Callable[[], None], repeats: int, device: torch.device) -> float:
    """Median seconds per call, after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return sorted(samples)[len(samples) // 2]


def _problem(shape: Shape, dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    bs, seq_len, hq, hkv, d = shape
    num_slots = bs * seq_len + 1  # slot 0 is the padding sink
    return dict(
        q=torch.randn(bs, hq, d, device=device, dtype=dtype),
        k_buffer=torch.randn(num_slots, hkv, d, device=device, dtype=dtype),
        v_buffer=torch.randn(num_slots, hkv, d, device=device, dtype=dtype),
        kv_indptr=torch.arange(0, bs + 1, device=device, dtype=torch.int64) * seq_len,
        kv_indices=torch.randperm(num_slots - 1, device=device) + 1,  # paged: scattered slots
    )


def _sdpa_baseline(p: dict[str, torch.Tensor], indptr: list[int], sm_scale: float) -> torch.Tensor:
    """Per request: gather its K/V rows, then SDPA over them (GQA through enable_gqa)."""
    outs = []
    for i in range(p["q"].shape[0]):
        slots = p["kv_indices"][indptr[i] : indptr[i + 1]]
        k = p["k_buffer"][slots].transpose(0, 1).unsqueeze(0)  # (1, Hkv, L, D)
        v = p["v_buffer"][slots].transpose(0, 1).unsqueeze(0)
        q = p["q"][i].unsqueeze(0).unsqueeze(2)  # (1, Hq, 1, D)
        outs.append(F.scaled_dot_product_attention(q, k, v, scale=sm_scale, enable_gqa=True)[0, :, 0])
    return torch.stack(outs)


def _bench_shape(shape: Shape, dtype: torch.dtype, device: torch.device, repeats: int) -> dict[str, float]:
    bs, seq_len, hq, hkv, d = shape
    p = _problem(shape, dtype, device)
    sm_scale = d**-0.5
    o = torch.empty(bs, hq, d, device=device, dtype=dtype)
    seq_lens = p["kv_indptr"].diff()
    scratch = dict(
        attn_logits=torch.empty(bs, hq, MAX_KV_SPLITS, d, device=device, dtype=torch.float32),
        attn_lse=torch.empty(bs, hq, MAX_KV_SPLITS, device=device, dtype=torch.float32),
    )
    splits = workbench_kernels.get_num_kv_splits(seq_lens, MAX_KV_SPLITS)

    def triton_call() -> None:
        workbench_kernels.decode_attention_fwd(
            o=o, num_kv_splits=splits, max_kv_splits=MAX_KV_SPLITS, sm_scale=sm_scale, **p, **scratch
        )

    t_triton = _timed(triton_call, repeats, device)
    indptr = p["kv_indptr"].tolist()  # host copy, so the baseline's loop does not sync
    t_sdpa = _timed(lambda: _sdpa_baseline(p, indptr, sm_scale), repeats, device)
    error = (o.float() - _sdpa_baseline(p, indptr, sm_scale).float()).abs().max().item()
    kv_bytes = bs * seq_len * hkv * 2 * d * p["k_buffer"].element_size()
    return dict(
        t_triton=t_triton,
        t_sdpa=t_sdpa,
        gbps_triton=kv_bytes / t_triton / 1e9,
        gbps_sdpa=kv_bytes / t_sdpa / 1e9,
        max_abs_diff=error,
    )


def _peak_gbps(device: torch.device, override: float | None) -> float | None:
    if override is not None or device.type != "cuda":
        return override
    name = torch.cuda.get_device_name(device)
    return next((gbps for key, gbps in PEAK_GBPS.items() if key in name), None)


def main(argv: list[str] | None = None) -> None:
    workbench_kernels.setup()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per shape (median reported)")
    parser.add_argument("--peak-gbps", type=float, default=None, help="the card's peak bandwidth, GB/s")
    args = parser.parse_args(argv)
    on_gpu = not workbench_kernels.interpreted()
    device = torch.device("cuda" if on_gpu else "cpu")
    dtype = torch.bfloat16 if on_gpu else torch.float32
    repeats = args.repeats or (20 if on_gpu else 2)
    peak = _peak_gbps(device, args.peak_gbps)
    print(f"kernel: {workbench_kernels.kernel_label()}  dtype: {dtype}  max_kv_splits: {MAX_KV_SPLITS}")
    if not on_gpu:
        print("NOTE: no GPU - the Triton kernel runs in Triton's interpreter (numpy, one program at a time).")
        print("      Its times measure the interpreter, not the kernel; they say nothing about GPU speed.")
    header = f"{'bs':>4} {'seq':>6} {'Hq':>3} {'Hkv':>3} {'D':>4} | {'triton ms':>10} {'GB/s':>8}"
    header += f" {'%peak':>6}" if peak else ""
    print(header + f" | {'sdpa ms':>9} {'GB/s':>8} | {'max|diff|':>9}")
    for shape in GPU_SHAPES if on_gpu else CPU_SHAPES:
        r = _bench_shape(shape, dtype, device, repeats)
        line = " ".join(f"{x:>{w}}" for x, w in zip(shape, (4, 6, 3, 3, 4), strict=False))
        line += f" | {r['t_triton'] * 1e3:>10.3f} {r['gbps_triton']:>8.2f}"
        line += f" {100 * r['gbps_triton'] / peak:>5.1f}%" if peak else ""
        print(line + f" | {r['t_sdpa'] * 1e3:>9.3f} {r['gbps_sdpa']:>8.2f} | {r['max_abs_diff']:>9.2e}")


if __name__ == "__main__":
    main()
