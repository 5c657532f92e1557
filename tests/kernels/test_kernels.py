"""Parity of the Triton kernels in ``kernels/`` against their torch references.

On a CPU-only machine the kernels run in Triton's interpreter; the launch-spy test makes sure
the public functions really launch them (a torch stand-in would fail it).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

import workbench_kernels
from workbench_kernels import decode_attention, extend_attention, kv_indices, spec_helpers

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
CPU_ONLY = not torch.cuda.is_available()
DEVICE = "cpu" if workbench_kernels.interpreted() else "cuda"


Pair = tuple[torch.Tensor, torch.Tensor]


def _ints(values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=DEVICE)


def _indptr(lens: list[int]) -> torch.Tensor:
    out = torch.zeros(len(lens) + 1, dtype=torch.int64)
    out[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return out.to(DEVICE)


def _paged(lens: list[int], num_slots: int, padded: tuple[int, ...] = ()) -> Pair:
    """kv_indptr and shuffled, non-contiguous kv_indices; rows in ``padded`` point at slot 0."""
    slots = (torch.randperm(num_slots - 1) + 1).tolist()
    chunks = []
    for row, n in enumerate(lens):
        chunks.append([0] * n if row in padded else slots[:n])
        slots = slots[n:]
    return _indptr(lens), _ints(sum(chunks, []))


def _cache(num_slots: int, hkv: int, d: int, dv: int, dtype: torch.dtype) -> Pair:
    return (
        torch.randn(num_slots, hkv, d, device=DEVICE).to(dtype),
        torch.randn(num_slots, hkv, dv, device=DEVICE).to(dtype),
    )


def _tree_mask(prefix_len: int, n: int) -> torch.Tensor:
    """(n, prefix_len + n): a random tree; each node sees the prefix, its ancestors and itself."""
    parent = [-1] + [random.randrange(i) for i in range(1, n)]
    mask = torch.zeros(n, prefix_len + n, dtype=torch.bool)
    mask[:, :prefix_len] = True
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, prefix_len + j] = True
            j = parent[j]
    return mask


def _max_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape
    return (out.float() - ref).abs().max().item() if out.numel() else 0.0


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    random.seed(0)


# ---------------------------------------------------------------- where the kernels run


@pytest.mark.skipif(not CPU_ONLY, reason="CPU-only behaviour")
def test_cpu_only_machine_uses_the_interpreter() -> None:
    from triton.runtime.interpreter import InterpretedFunction

    assert workbench_kernels.interpreted()
    assert workbench_kernels.kernel_label() == "triton (interpreter, CPU)"
    assert isinstance(decode_attention._decode_split_kernel, InterpretedFunction)


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )


@pytest.mark.skipif(not CPU_ONLY, reason="CPU-only behaviour")
def test_importing_the_kernels_has_no_effect_and_a_foreign_triton_first_is_a_clear_error() -> None:
    """The workbench's imports touch neither triton nor the environment; the first kernel module
    to load sets up the interpreter. triton imported by someone else first is a RuntimeError."""
    ok = _fresh_python(
        "import os, sys, torch, workbench_kernels, workbench.backends.triton, workbench.engine.ops\n"
        "assert 'triton' not in sys.modules and 'TRITON_INTERPRET' not in os.environ\n"
        "from workbench_kernels import kv_indices\n"
        "out = torch.empty(3, dtype=torch.int64)\n"
        "workbench_kernels.build_kv_indices(req_to_token=torch.arange(8, dtype=torch.int32).view(2, 4),"
        " req_pool_indices=torch.tensor([1]), seq_lens=torch.tensor([3]), kv_indptr=torch.tensor([0, 3]),"
        " kv_indices=out)\n"
        "print(out.tolist(), workbench_kernels.kernel_label(), type(kv_indices._build_kv_indices_kernel).__name__)"
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "[4, 5, 6] triton (interpreter, CPU) InterpretedFunction", ok.stdout
    off = _fresh_python("import triton\nimport workbench_kernels\nworkbench_kernels.setup()")
    assert off.returncode != 0 and "RuntimeError" in off.stderr
    assert (
        "triton was imported before workbench_kernels.setup()" in off.stderr and "set TRITON_INTERPRET=1" in off.stderr
    )


class _LaunchSpy:
    """Stands in for a jitted kernel and counts launches through ``kernel[grid](...)``."""

    def __init__(self, kernel: object) -> None:
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid: object) -> Callable[..., None]:
        def launch(*args: object, **kwargs: object) -> None:
            self.launches += 1
            self.kernel[grid](*args, **kwargs)

        return launch


def test_public_functions_launch_the_triton_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    spies = {}
    for module, name in [
        (decode_attention, "_decode_split_kernel"),
        (decode_attention, "_decode_merge_kernel"),
        (extend_attention, "_extend_kernel"),
        (kv_indices, "_build_kv_indices_kernel"),
        (spec_helpers, "_assign_req_to_token_kernel"),
        (spec_helpers, "_draft_extend_inputs_kernel"),
    ]:
        spies[name] = _LaunchSpy(getattr(module, name))
        monkeypatch.setattr(module, name, spies[name])
    _check_decode(hkv=1, group=2, d=64, dv=64, lens=[], splits=[])
    _check_extend(hkv=1, group=2, d=64, prefixes=[], q_lens=[], mode="causal")
    assert all(spy.launches == 0 for spy in spies.values())  # bs 0 launches nothing
    _check_decode(hkv=1, group=2, d=64, dv=64, lens=[3, 9], splits=[1, 2])
    _check_extend(hkv=1, group=2, d=64, prefixes=[4], q_lens=[3], mode="causal")
    _check_build_kv_indices(with_start=True)
    _check_assign_req_to_token_pool()
    _check_draft_extend_positions_and_bonus()
    assert [name for name, spy in spies.items() if spy.launches == 0] == []


# ---------------------------------------------------------------- decode attention


def _check_decode(
    *,
    hkv: int,
    group: int,
    d: int,
    dv: int,
    lens: list[int],
    splits: list[int] | None,
    dtype: torch.dtype = torch.float32,
    padded: tuple[int, ...] = (),
    max_splits: int = 8,
) -> None:
    bs, hq = len(lens), hkv * group
    k_buffer, v_buffer = _cache(sum(lens) + 8, hkv, d, dv, dtype)
    kv_indptr, kv_idx = _paged(lens, k_buffer.shape[0], padded)
    q = torch.randn(bs, hq, d, device=DEVICE).to(dtype)
    o = torch.full((bs, hq, dv), float("nan"), device=DEVICE).to(dtype)
    num_splits = (
        workbench_kernels.get_num_kv_splits(_ints(lens), max_splits) if splits is None else _ints(splits, torch.int32)
    )
    workbench_kernels.decode_attention_fwd(
        q=q,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        o=o,
        kv_indptr=kv_indptr,
        kv_indices=kv_idx,
        num_kv_splits=num_splits,
        max_kv_splits=max_splits,
        sm_scale=d**-0.5,
        attn_logits=torch.empty(bs, hq, max_splits, dv, device=DEVICE),
        attn_lse=torch.empty(bs, hq, max_splits, device=DEVICE),
    )
    ref = workbench_kernels.decode_attention_ref(
        q=q, k_buffer=k_buffer, v_buffer=v_buffer, kv_indptr=kv_indptr, kv_indices=kv_idx, sm_scale=d**-0.5
    )
    assert _max_error(o, ref) <= TOL[dtype]


@pytest.mark.parametrize(
    "case",
    [
        dict(hkv=4, group=1, d=64, dv=64, lens=[1, 37, 300], splits=[4, 1, 3]),
        dict(hkv=2, group=2, d=80, dv=80, lens=[129, 7, 64, 2], splits=None),
        dict(hkv=2, group=4, d=64, dv=64, lens=[513, 3], splits=[8, 2], dtype=torch.bfloat16),
        dict(hkv=1, group=8, d=80, dv=80, lens=[2100, 5], splits=None),
        dict(hkv=2, group=4, d=80, dv=64, lens=[1, 200, 1, 1], splits=[1, 2, 1, 1], padded=(0, 2, 3)),
        dict(hkv=2, group=2, d=32, dv=32, lens=[1, 1], splits=[1, 1], padded=(0, 1)),
        dict(hkv=1, group=2, d=64, dv=64, lens=[100, 0, 50], splits=[0, 3, 99], max_splits=4),
    ],
    ids=[
        "gqa1-d64",
        "gqa2-d80",
        "gqa4-bf16",
        "gqa8-long2100",
        "padded-idle-rows",
        "all-padded-d32",
        "splits-out-of-range-clamped",
    ],
)
def test_decode_attention_matches_reference(case: dict) -> None:
    _check_decode(**case)


@pytest.mark.parametrize("seed", range(4))
def test_decode_attention_random_configs(seed: int) -> None:
    rng = random.Random(seed)
    bs = rng.randint(1, 4)
    lens = [rng.choice([1, rng.randint(2, 64), rng.randint(65, 600)]) for _ in range(bs)]
    d = rng.choice([32, 64, 80])
    _check_decode(
        hkv=rng.choice([1, 2]),
        group=rng.choice([1, 2, 4, 8]),
        d=d,
        dv=d,
        lens=lens,
        splits=[rng.randint(1, 8) for _ in lens],
        padded=(0,) if lens[0] == 1 else (),
        dtype=rng.choice([torch.float32, torch.bfloat16]),
    )


def test_decode_attention_batch_size_zero_is_a_no_op() -> None:
    _check_decode(hkv=2, group=2, d=64, dv=64, lens=[], splits=[])


def test_get_num_kv_splits() -> None:
    assert workbench_kernels.get_num_kv_splits(torch.zeros(0, dtype=torch.int64), 8).shape == (0,)
    splits = workbench_kernels.get_num_kv_splits(torch.tensor([0, 1, 256, 257, 100_000]), 8)
    assert splits.tolist() == [1, 1, 1, 2, 8] and splits.dtype == torch.int32


# ---------------------------------------------------------------- extend attention


def _check_extend(
    *,
    hkv: int,
    group: int,
    d: int,
    prefixes: list[int],
    q_lens: list[int],
    mode: str,
    dtype: torch.dtype = torch.float32,
    mask_dtype: torch.dtype = torch.bool,
) -> None:
    hq, tokens = hkv * group, sum(q_lens)
    k_buffer, v_buffer = _cache(sum(prefixes) + 8, hkv, d, d, dtype)
    kv_indptr, kv_idx = _paged(prefixes, k_buffer.shape[0])
    q_extend = torch.randn(tokens, hq, d, device=DEVICE).to(dtype)
    k_extend, v_extend = _cache(tokens, hkv, d, d, dtype)
    custom_mask = mask_indptr = None
    if mode == "tree":
        masks = [_tree_mask(p, n).flatten() for p, n in zip(prefixes, q_lens, strict=False)]
        custom_mask = torch.cat(masks).to(device=DEVICE, dtype=mask_dtype)
        mask_indptr = _indptr([m.numel() for m in masks])
    args = dict(
        q_extend=q_extend,
        k_extend=k_extend,
        v_extend=v_extend,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=_indptr(q_lens),
        kv_indptr=kv_indptr,
        kv_indices=kv_idx,
        custom_mask=custom_mask,
        mask_indptr=mask_indptr,
        is_causal=mode == "causal",
        sm_scale=d**-0.5,
    )
    o = torch.full((tokens, hq, d), float("nan"), device=DEVICE).to(dtype)
    workbench_kernels.extend_attention_fwd(o_extend=o, max_len_extend=max(q_lens, default=0), **args)
    ref = workbench_kernels.extend_attention_ref(**args)
    assert _max_error(o, ref) <= TOL[dtype]


@pytest.mark.parametrize(
    "case",
    [
        dict(hkv=4, group=1, d=64, prefixes=[0, 10, 300], q_lens=[7, 1, 70], mode="causal"),
        dict(hkv=2, group=2, d=80, prefixes=[33, 0], q_lens=[1, 40], mode="causal"),
        dict(hkv=2, group=4, d=64, prefixes=[5, 120], q_lens=[20, 3], mode="full"),
        dict(hkv=1, group=8, d=80, prefixes=[64, 1], q_lens=[17, 9], mode="causal", dtype=torch.bfloat16),
        dict(hkv=2, group=1, d=80, prefixes=[40, 300, 1], q_lens=[16, 16, 16], mode="tree"),
        dict(hkv=1, group=4, d=64, prefixes=[2100], q_lens=[16], mode="tree", mask_dtype=torch.uint8),
        dict(hkv=2, group=2, d=64, prefixes=[7, 90], q_lens=[16, 16], mode="tree", dtype=torch.bfloat16),
        dict(hkv=2, group=2, d=64, prefixes=[], q_lens=[], mode="causal"),
    ],
    ids=[
        "causal-gqa1-d64",
        "causal-gqa2-d80",
        "full-gqa4",
        "causal-gqa8-bf16",
        "tree16-gqa1-d80",
        "tree16-long2100-uint8",
        "tree16-bf16",
        "batch-size-zero",
    ],
)
def test_extend_attention_matches_reference(case: dict) -> None:
    _check_extend(**case)


@pytest.mark.parametrize("seed", range(4))
def test_extend_attention_random_configs(seed: int) -> None:
    rng = random.Random(seed)
    bs = rng.randint(1, 3)
    _check_extend(
        hkv=rng.choice([1, 2]),
        group=rng.choice([1, 2, 4, 8]),
        d=rng.choice([32, 64, 80]),
        prefixes=[rng.choice([0, rng.randint(1, 300)]) for _ in range(bs)],
        q_lens=[rng.randint(1, 40) for _ in range(bs)],
        mode=rng.choice(["causal", "full", "tree"]),
        dtype=rng.choice([torch.float32, torch.bfloat16]),
    )


# ---------------------------------------------------------------- metadata helpers


def _check_build_kv_indices(*, with_start: bool) -> None:
    req_to_token = torch.randint(1, 10_000, (6, 2300), dtype=torch.int32, device=DEVICE)
    req_to_token[0] = 0  # the padding request row
    for lens, reqs in [([5, 1, 2100, 0, 1], [3, 1, 5, 2, 0]), ([], [])]:
        seq_lens, pool_idx = _ints(lens), _ints(reqs)
        start = _ints([2, 0, 150, 9, 0][: len(lens)]) if with_start else None
        kv_indptr = _indptr(lens)
        out = torch.full((sum(lens),), -1, dtype=torch.int64, device=DEVICE)
        workbench_kernels.build_kv_indices(
            req_to_token=req_to_token,
            req_pool_indices=pool_idx,
            seq_lens=seq_lens,
            kv_indptr=kv_indptr,
            kv_indices=out,
            kv_start_idx=start,
        )
        ref = torch.full_like(out, -1)
        workbench_kernels.build_kv_indices_ref(
            req_to_token=req_to_token,
            req_pool_indices=pool_idx,
            seq_lens=seq_lens,
            kv_indptr=kv_indptr,
            kv_indices=ref,
            kv_start_idx=start,
        )
        assert torch.equal(out, ref)
        for i, (n, row) in enumerate(zip(lens, reqs, strict=False)):  # and both against the table itself
            first = int(start[i]) if start is not None else 0
            assert torch.equal(
                out[int(kv_indptr[i]) : int(kv_indptr[i]) + n], req_to_token[row, first : first + n].long()
            )


def _check_assign_req_to_token_pool() -> None:
    for starts, counts, reqs in [([3, 0, 100, 7], [4, 1, 0, 300], [2, 0, 5, 1]), ([], [], [])]:
        start = _ints(starts)
        args = dict(
            req_pool_indices=_ints(reqs),
            start_offset=start,
            end_offset=start + _ints(counts),
            out_cache_loc=torch.randint(1, 10_000, (sum(counts),), device=DEVICE),
        )
        table = torch.randint(0, 10_000, (6, 512), dtype=torch.int32, device=DEVICE)
        expected = table.clone()
        workbench_kernels.assign_req_to_token_pool(req_to_token=table, **args)
        workbench_kernels.assign_req_to_token_pool_ref(req_to_token=expected, **args)
        assert torch.equal(table, expected)
        at = 0
        for row, first, n in zip(reqs, starts, counts, strict=False):  # and both against the definition
            assert torch.equal(table[row, first : first + n].long(), args["out_cache_loc"][at : at + n])
            at += n


def _check_draft_extend_positions_and_bonus() -> None:
    for before, accepted in [([10, 3, 50, 0], [3, 1, 2, 4]), ([7, 5], [0, 2]), ([], [])]:
        args = dict(
            seq_lens_before=_ints(before),
            accept_lens=_ints(accepted, torch.int32),
            packed_tokens=torch.randint(0, 32_000, (sum(accepted),), device=DEVICE),
        )
        positions = torch.full((sum(accepted),), -7, dtype=torch.int64, device=DEVICE)
        bonus = torch.full((len(accepted),), -7, dtype=torch.int64, device=DEVICE)
        workbench_kernels.draft_extend_positions_and_bonus(positions=positions, bonus_tokens=bonus, **args)
        ref_positions, ref_bonus = torch.full_like(positions, -7), torch.full_like(bonus, -7)
        workbench_kernels.draft_extend_positions_and_bonus_ref(positions=ref_positions, bonus_tokens=ref_bonus, **args)
        assert torch.equal(positions, ref_positions) and torch.equal(bonus, ref_bonus)
        at = 0
        for i, (b, n) in enumerate(zip(before, accepted, strict=False)):  # and both against the definition
            assert positions[at : at + n].tolist() == list(range(b, b + n))
            assert int(bonus[i]) == (int(args["packed_tokens"][at + n - 1]) if n else -1)
            at += n


@pytest.mark.parametrize("with_start", [False, True])
def test_build_kv_indices(with_start: bool) -> None:
    _check_build_kv_indices(with_start=with_start)


def test_assign_req_to_token_pool() -> None:
    _check_assign_req_to_token_pool()


def test_draft_extend_positions_and_bonus() -> None:
    _check_draft_extend_positions_and_bonus()
