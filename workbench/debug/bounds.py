"""Bounds and self-consistency of a crash bundle, checked before the replay allocates anything.

A bundle may come from elsewhere: every size and index it gives (pool shape, slot numbers, attention
dims, layer count, lengths, batch size) is checked against a limit far above what a crash of this
engine reaches, and the batch must add up the way the writer builds it (token counts per forward
mode, the columns stored, the verify tree). A violation is a ``BundleError`` naming the field, the
value and the limit, so a corrupt bundle is refused instead of "reproducing" a crash.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from workbench.debug.bundle import DTYPES, BundleError
from workbench.engine.forward_mode import ForwardMode

# Each limit is far above what a real crash of the workbench reaches (the shipped models: 8 layers,
# 4 heads of 64, context 1024; max_running 20 -> a 25-row request table; SGLang's largest settings
# stay below them too).
LIMITS = {
    "dp": 256,  # DP ranks (one process each)
    "rank": 255,
    "batch_size": 65536,  # rows of one forward (max running requests x draft branches)
    "req_to_token rows": 65536,
    "req_to_token columns": 1 << 20,  # a context of 1 M tokens
    "num_layers": 1024,
    "num_heads": 1024,
    "num_kv_heads": 1024,
    "head_dim": 1024,
    "tokens": 1 << 24,  # tokens of one forward (input_ids, positions, out_cache_loc)
    "slot": (1 << 31) - 1,  # req_to_token holds int32 slot ids
    "tensor elements": 1 << 26,  # any one stored or omitted tensor
    "spec value": (1 << 31) - 1,  # an integer field of the spec input (draft_token_num, seq_lens_sum, ...)
    "spec list length": 65536,
}
MAX_JSON_BYTES = 16 << 20
MAX_TENSOR_FILE_BYTES = 512 << 20
MAX_REPLAY_BYTES = 2 << 30  # request table + KV buffers + omitted spec tensors the replay creates


def _fail(f: Path, what: str) -> BundleError:
    return BundleError(f"crash bundle {f}: {what}")


def read_meta(f: Path, fmt: str, version: int, required: tuple[str, ...]) -> dict:
    """A bundle's ``bundle.json`` at ``f``: size-checked before it is read, UTF-8 JSON, of format ``fmt``
    at a version ``1..version`` (a newer one is refused: upgrade the workbench), with every ``required`` key.
    Shared by the engine's crash bundles and the real runtime's rank bundles."""
    if not f.is_file():
        raise _fail(f, "missing (a bundle directory holds bundle.json and tensors.safetensors)")
    check_int(f, "size in bytes", f.stat().st_size, 1, MAX_JSON_BYTES)
    try:
        meta = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(f, f"not valid UTF-8 JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise _fail(f, f"format {meta.get('format') if isinstance(meta, dict) else None!r} is not {fmt!r}")
    v = meta.get("format_version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise _fail(f, f"format_version {v!r} is not a positive integer")
    if v > version:
        raise _fail(f, f"format_version {v} is newer than this workbench reads ({version}); upgrade the workbench")
    missing = [k for k in required if k not in meta]
    if missing:
        raise _fail(f, f"missing keys {missing}")
    return meta


def check_int(f: Path, name: str, value: Any, lo: int, hi: int, why: str = "") -> int:
    """``value`` as an int in ``[lo, hi]``, or a BundleError naming field, value and limit."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(f, f"{name} {value!r} is not an integer")
    if value < lo:
        raise _fail(f, f"{name} {value} is below the minimum {lo}{why}")
    if value > hi:
        raise _fail(f, f"{name} {value} exceeds the limit {hi}{why}")
    return value


def check_shape(f: Path, name: str, shape: Any) -> list[int]:
    """A declared tensor shape: a list of non-negative ints with at most LIMITS['tensor elements'] elements."""
    if not isinstance(shape, list) or len(shape) > 8:
        raise _fail(f, f"{name} shape {shape!r} is not a list of at most 8 dimensions")
    dims = [check_int(f, f"{name} dimension", d, 0, LIMITS["tensor elements"]) for d in shape]
    check_int(f, f"{name} elements", math.prod(dims), 0, LIMITS["tensor elements"], f" (shape {dims})")
    return dims


def _nbytes(shape: list[int], dtype: str) -> int:
    return math.prod(shape) * torch.empty(0, dtype=DTYPES[dtype]).element_size()


def check_meta(f: Path, meta: dict) -> None:
    """The JSON alone: every size and count within LIMITS, before any tensor is read."""
    dp = check_int(f, "dp", meta["dp"], 1, LIMITS["dp"])
    check_int(f, "rank", meta["rank"], 0, dp - 1, f" (dp {dp})")
    check_int(f, "batch_size", meta["batch_size"], 0, LIMITS["batch_size"])
    shape = meta["req_to_token_shape"]
    if not isinstance(shape, list) or len(shape) != 2:
        raise _fail(f, f"req_to_token_shape {shape!r} is not [rows, columns]")
    rows = check_int(f, "req_to_token_shape rows", shape[0], 1, LIMITS["req_to_token rows"])
    cols = check_int(f, "req_to_token_shape columns", shape[1], 1, LIMITS["req_to_token columns"])
    a = meta["attention"]
    if not isinstance(a, dict):
        raise _fail(f, f"attention {a!r} is not a mapping")
    for k in ("num_layers", "num_heads", "num_kv_heads", "head_dim"):
        check_int(f, f"attention.{k}", a.get(k), 1, LIMITS[k])
    if a["num_heads"] % a["num_kv_heads"]:
        raise _fail(f, f"attention.num_heads {a['num_heads']} is not a multiple of num_kv_heads {a['num_kv_heads']}")
    if a.get("dtype") not in DTYPES or not DTYPES[a["dtype"]].is_floating_point:
        raise _fail(
            f, f"attention.dtype {a.get('dtype')!r}; valid: {[k for k, v in DTYPES.items() if v.is_floating_point]}"
        )
    if not isinstance(meta["tensors"], dict):
        raise _fail(f, f"tensors {meta['tensors']!r} is not a mapping")
    for k, t in meta["tensors"].items():
        if not isinstance(t, dict) or t.get("dtype") not in DTYPES:
            raise _fail(
                f, f"tensor {k!r} dtype {t.get('dtype') if isinstance(t, dict) else t!r}; valid: {list(DTYPES)}"
            )
        check_shape(f, f"tensor {k!r}", t.get("shape"))
    omitted = 0
    for name, e in ((meta["spec_info"] or {}).get("fields") or {}).items():
        if not isinstance(e, dict):
            continue  # the kind check (load.py) names it
        if e.get("kind") == "tensor_omitted" and e.get("dtype") in DTYPES:
            omitted += _nbytes(check_shape(f, f"spec_info field {name!r}", e.get("shape")), e["dtype"])
        if e.get("kind") == "value":
            values = e.get("value") if isinstance(e.get("value"), list) else [e.get("value")]
            check_int(f, f"spec_info field {name!r} length", len(values), 0, LIMITS["spec list length"])
            for v in values:
                if isinstance(v, int) and not isinstance(v, bool):
                    check_int(f, f"spec_info field {name!r}", v, -1, LIMITS["spec value"])
    ex = meta["exception"]
    if not isinstance(ex, dict) or not all(isinstance(ex.get(k), str) for k in ("type", "message", "file")):
        raise _fail(f, f"exception {ex!r} lacks type, message and file as strings")
    check_int(f, "exception.line", ex.get("line"), 0, 1 << 24)
    table = rows * cols * 4  # int32
    check_int(f, "replay allocation (request table + omitted spec tensors) bytes", table + omitted, 0, MAX_REPLAY_BYTES)


def _ints(f: Path, t: dict[str, torch.Tensor], key: str, dim: int = 1) -> torch.Tensor | None:
    v = t.get(key)
    if v is None:
        return None
    if v.dtype.is_floating_point or v.dtype == torch.bool or v.dim() != dim:
        raise _fail(
            f, f"{key} is {str(v.dtype).removeprefix('torch.')} {list(v.shape)}; valid: a {dim}-D integer tensor"
        )
    return v.to(torch.int64)


def _range(f: Path, key: str, v: torch.Tensor, lo: int, hi: int, why: str = "") -> None:
    if v.numel():
        check_int(f, f"{key} min", int(v.min()), lo, 1 << 62, why)
        check_int(f, f"{key} max", int(v.max()), lo, hi, why)


def check_batch(f: Path, meta: dict, t: dict[str, torch.Tensor]) -> None:
    """The tensors: integer index tensors in range, and a batch that adds up as the writer builds it."""
    if meta["forward_mode"] not in ForwardMode.__members__:
        raise _fail(f, f"forward_mode {meta['forward_mode']!r}; valid: {list(ForwardMode.__members__)}")
    mode = ForwardMode[meta["forward_mode"]]
    bs, (n_rows, width) = meta["batch_size"], meta["req_to_token_shape"]
    fb = {
        k: _ints(f, t, f"forward_batch.{k}")
        for k in (
            "seq_lens",
            "req_pool_indices",
            "extend_seq_lens",
            "extend_prefix_lens",
            "input_ids",
            "positions",
            "out_cache_loc",
        )
    }
    for k in ("seq_lens", "req_pool_indices", "extend_seq_lens", "extend_prefix_lens"):
        if fb[k] is not None and fb[k].numel() != bs:
            raise _fail(f, f"forward_batch.{k} has shape {[fb[k].numel()]}, batch_size is {bs}")
    n_tokens = {k: fb[k].numel() for k in ("input_ids", "positions", "out_cache_loc")}
    if len(set(n_tokens.values())) != 1:
        raise _fail(f, f"input_ids, positions and out_cache_loc differ in length: {n_tokens}")
    tokens = check_int(f, "tokens (input_ids length)", n_tokens["input_ids"], 0, LIMITS["tokens"])
    row_ids, rows = _ints(f, t, "req_to_token.row_ids"), _ints(f, t, "req_to_token.rows", dim=2)
    if rows.shape[0] != row_ids.numel() or rows.shape[1] > width:
        raise _fail(
            f,
            f"req_to_token.rows {list(rows.shape)} does not fit row_ids {list(row_ids.shape)} "
            f"and req_to_token_shape {meta['req_to_token_shape']}",
        )
    if row_ids.numel() and (int(row_ids.min()) < 0 or int(row_ids.max()) >= n_rows):
        raise _fail(f, f"req_to_token.row_ids {row_ids.tolist()} outside the pool's {n_rows} rows")
    if row_ids.numel() != len(set(row_ids.tolist())):
        raise _fail(f, f"req_to_token.row_ids {row_ids.tolist()} repeat a row")
    pool_idx, seq_lens = fb["req_pool_indices"], fb["seq_lens"]
    unknown = sorted(set(pool_idx.tolist()) - set(row_ids.tolist()))
    if unknown:
        raise _fail(f, f"req_pool_indices {unknown} have no row in req_to_token.rows")
    _range(f, "forward_batch.seq_lens", seq_lens, 0, width, f" (req_to_token has {width} columns)")
    _range(f, "req_to_token.rows slot", rows, 0, LIMITS["slot"])
    _range(f, "forward_batch.out_cache_loc slot", fb["out_cache_loc"], 0, LIMITS["slot"])
    _range(f, "forward_batch.positions", fb["positions"], 0, width - 1, f" (req_to_token has {width} columns)")
    spec = meta["spec_info"] or {}
    fields = spec.get("fields") or {}
    verify = mode == ForwardMode.TARGET_VERIFY
    if verify != (spec.get("class") == "EagleVerifyInput"):
        raise _fail(
            f, f"forward_mode {mode.name} with spec_info {spec.get('class')}: verify and EagleVerifyInput go together"
        )
    n_draft = 0
    if verify:
        n_draft = check_int(
            f, "spec_info draft_token_num", (fields.get("draft_token_num") or {}).get("value"), 1, width
        )
        sum_entry = (fields.get("seq_lens_sum") or {}).get("value")
        if sum_entry != int(seq_lens.sum()):
            raise _fail(f, f"spec_info seq_lens_sum {sum_entry!r} is not the sum of seq_lens {int(seq_lens.sum())}")
    stored = min(int(seq_lens.max()) + n_draft, width) if bs else 0
    if rows.shape[1] != stored:
        raise _fail(
            f,
            f"req_to_token.rows has {rows.shape[1]} columns; the batch reads {stored} "
            f"(max seq_lens{' + draft_token_num' if verify else ''}, at most {width})",
        )
    ext, pre = fb["extend_seq_lens"], fb["extend_prefix_lens"]
    if (ext is None) != (pre is None):
        raise _fail(f, "extend_seq_lens and extend_prefix_lens come together or not at all")
    if mode in (ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND, ForwardMode.TARGET_VERIFY) and ext is None:
        raise _fail(f, f"forward_mode {mode.name} without extend_seq_lens / extend_prefix_lens")
    if ext is not None:
        _range(f, "forward_batch.extend_seq_lens", ext, 0, width)
        _range(f, "forward_batch.extend_prefix_lens", pre, 0, width)
        if int(ext.sum()) != tokens:
            raise _fail(f, f"extend_seq_lens sum to {int(ext.sum())}, the batch has {tokens} tokens")
        want = seq_lens if verify else seq_lens - ext
        if not torch.equal(pre, want):
            raise _fail(
                f,
                f"extend_prefix_lens {pre.tolist()} are not "
                f"{'seq_lens' if verify else 'seq_lens - extend_seq_lens'} {want.tolist()}",
            )
        if verify and not bool((ext == n_draft).all()):
            raise _fail(f, f"extend_seq_lens {ext.tolist()} are not draft_token_num {n_draft} per request")
    elif tokens != bs:
        raise _fail(f, f"a {mode.name} batch has one token per row: {tokens} tokens, batch_size {bs}")
    padded = (meta.get("forward_batch") or {}).get("is_padded_idle")  # optional in format 1: checked when given
    if mode == ForwardMode.IDLE and padded is not None and bool(padded) != (bs > 0):
        raise _fail(f, f"an IDLE batch of size {bs} with is_padded_idle {padded}")


def check_spec_indices(f: Path, meta: dict, t: dict[str, torch.Tensor]) -> None:
    """A spec input's own kv_indptr / kv_indices (multi-step draft decode): a valid CSR over slots."""
    fields = (meta["spec_info"] or {}).get("fields") or {}
    keys = {n: (fields.get(n) or {}).get("key") for n in ("kv_indptr", "kv_indices")}
    if not all(keys.values()):
        return
    ptr, idx = _ints(f, t, keys["kv_indptr"]), _ints(f, t, keys["kv_indices"])
    if ptr.numel() == 0 or int(ptr[0]) != 0 or bool((ptr.diff() < 0).any()) or int(ptr[-1]) != idx.numel():
        raise _fail(f, f"spec_info kv_indptr {ptr.tolist()[:16]} is not 0, non-decreasing, ending at {idx.numel()}")
    _range(f, "spec_info kv_indices slot", idx, 0, LIMITS["slot"])


def check_replay_bytes(f: Path, meta: dict, t: dict[str, torch.Tensor]) -> None:
    """What ``replay.rebuild`` allocates: the request table and KV buffers up to the largest slot."""
    a = meta["attention"]
    slots = [
        int(v.max()) for k, v in t.items() if v.numel() and k in ("req_to_token.rows", "forward_batch.out_cache_loc")
    ]
    capacity = max(slots, default=0) + 1
    per_slot = a["num_kv_heads"] * a["head_dim"] * 2 * a["num_layers"] * _nbytes([1], a["dtype"])
    rows, cols = meta["req_to_token_shape"]
    check_int(
        f,
        "replay allocation (request table + KV buffers) bytes",
        rows * cols * 4 + capacity * per_slot,
        0,
        MAX_REPLAY_BYTES,
        f" (KV up to slot {capacity - 1}, {a['num_layers']} layers)",
    )
