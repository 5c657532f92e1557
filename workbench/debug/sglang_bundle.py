"""Crash bundles of the released SGLang runtime's ranks: loaded and checked before anything is allocated.

A failing rank of ``workbench upstream run`` writes ``crash-bundle-rank<R>/`` (``bundle.json`` and
``tensors.safetensors``; the writer is ``workbench/upstream/runtime/rank_bundle.py``, which runs in
the release's environment). Loading never runs code: JSON, then safetensors whose header (every
tensor's dtype and shape) is checked against bundle.json and the limits before a tensor is read.
Sizes and indices are bounded with the engine's bundle limits (``workbench.debug.bounds``), the
classes a bundle names must be in an allow-list, and the batch must fit the pools it names. A
violation is a ``BundleError`` naming the file, the field, the value and the limit or valid values.
Imports torch and safetensors only (it is imported in a release's kernel too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from workbench.debug import bounds
from workbench.debug.bounds import LIMITS, check_int, check_shape
from workbench.debug.bundle import DTYPES, BundleError

FORMAT = "eagle-workbench-sglang-rank-bundle"  # as rank_bundle.py writes it
FORMAT_VERSION = 1
JSON_NAME, TENSORS_NAME = "bundle.json", "tensors.safetensors"
REQUIRED_KEYS = (
    "rank",
    "dp",
    "forward_mode",
    "batch_size",
    "forward_batch",
    "spec_info",
    "backend",
    "pools",
    "runner",
    "server_args",
    "release",
    "code_state",
    "exception",
    "raised_at",
    "traceback",
    "tensors",
)
REQUIRED_TENSORS = (
    "forward_batch.seq_lens",
    "forward_batch.req_pool_indices",
    "req_to_token.row_ids",
    "req_to_token.rows",
)
# the only classes a bundle may name: (module, class); the replay imports nothing else
SPEC_CLASSES = {
    ("sglang.srt.speculative.eagle_info", "EagleVerifyInput"),
    ("sglang.srt.speculative.eagle_info", "EagleDraftInput"),
    ("sglang.srt.speculative.eagle_info", "EagleDraftExtendInput"),
}
BACKEND_CLASSES = {
    ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend"),
    ("sglang.srt.layers.attention.torch_native_backend", "TorchNativeAttnBackend"),
}
METHODS = ("init_forward_metadata",)  # the backend methods a replay may call
KV_POOLS = ("sglang.srt.mem_cache.memory_pool.MHATokenToKVPool",)
ENUM_TYPES = ("ForwardMode", "CaptureHiddenMode", "SpeculativeAlgorithm", "DpPaddingMode", "SpecInputType")
KINDS = ("tensor", "tensor_omitted", "value", "enum", "none", "object", "list_omitted")
MAX_STR = 4096  # one string value
MAX_ATTRIBUTES = 1024  # entries of one mapping (batch fields, spec attributes, backend and runner settings)


def _fail(f: Path, what: str) -> BundleError:
    return BundleError(f"crash bundle {f}: {what}")


@dataclass
class RankBundle:
    """A loaded, checked bundle of a real-runtime rank: ``meta`` is bundle.json, ``tensors`` by key."""

    path: Path
    meta: dict
    tensors: dict[str, torch.Tensor]

    def value(self, entry: dict | None) -> Any:
        """An attribute entry's value: its tensor, a zero tensor of an omitted one's shape, a plain
        value, an enum member's name, or None (none, object, list_omitted)."""
        if entry is None:
            return None
        kind = entry["kind"]
        if kind == "tensor":
            return self.tensors[entry["key"]]
        if kind == "tensor_omitted":
            return torch.zeros(entry["shape"], dtype=DTYPES[entry["dtype"]])
        if kind in ("value", "enum"):
            return entry["value"]
        return None

    @property
    def spec_missing(self) -> list[str]:
        """The spec input's attributes that were absent on the run's object."""
        return list((self.meta["spec_info"] or {}).get("missing", []))

    def summary(self) -> str:
        m, e, at = self.meta, self.meta["exception"], self.meta["raised_at"] or {}
        spec = m["spec_info"] or {}
        return (
            f"{self.path}: rank {m['rank']} of dp {m['dp']}, {m['forward_mode']} bs {m['batch_size']}, "
            f"{m['backend']['class']}.{m['backend']['method']}, sglang {m['release']['version']} "
            f"(sources {m['release']['src_root']}), fixes {[x['fix'] for x in m['code_state'].get('fixes', [])]}, "
            f"spec_info {spec.get('class')} missing {spec.get('missing')}\n  {e['type']}: {e['message']}\n"
            f"  at {at.get('relative')}:{at.get('line')} in {at.get('function')}"
        )


def _read_meta(d: Path) -> dict:
    return bounds.read_meta(d / JSON_NAME, FORMAT, FORMAT_VERSION, REQUIRED_KEYS)


def _mapping(f: Path, name: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise _fail(f, f"{name} {str(value)[:80]!r} is not a mapping")
    check_int(f, f"{name} entries", len(value), 0, MAX_ATTRIBUTES)
    return value


def _class(f: Path, name: str, entry: Any, allowed: set) -> None:
    key = (entry.get("module"), entry.get("class")) if isinstance(entry, dict) else (None, None)
    if key not in allowed:
        raise _fail(
            f,
            f"{name} class {key[0]}.{key[1]} is not allowed; allowed: {sorted(f'{m}.{c}' for m, c in allowed)}",
        )


def _plain_value(f: Path, name: str, value: Any) -> None:
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list):
        check_int(f, f"{name} length", len(value), 0, LIMITS["spec list length"])
    for v in items:
        if isinstance(v, str):
            check_int(f, f"{name} string length", len(v), 0, MAX_STR)
        elif isinstance(v, int) and not isinstance(v, bool):
            check_int(f, name, v, -LIMITS["spec value"] - 1, LIMITS["spec value"])
        elif not (v is None or isinstance(v, (bool, float))):
            raise _fail(f, f"{name} value {str(v)[:80]!r}; valid: null, booleans, numbers, strings or lists of them")


def _entries(f: Path, name: str, entries: dict, declared: dict) -> None:
    """Every attribute entry: a known kind, a tensor key bundle.json declares, bounded shapes and values."""
    for attr, e in _mapping(f, name, entries).items():
        kind = e.get("kind") if isinstance(e, dict) else None
        where = f"{name}.{attr}"
        if kind not in KINDS:
            raise _fail(f, f"{where} has kind {kind!r}; valid: {list(KINDS)}")
        if kind == "tensor" and e.get("key") not in declared:
            raise _fail(f, f"{where} names tensor {e.get('key')!r}, which bundle.json's tensors do not declare")
        if kind == "tensor_omitted":
            if e.get("dtype") not in DTYPES:
                raise _fail(f, f"{where} dtype {e.get('dtype')!r}; valid: {list(DTYPES)}")
            check_shape(f, where, e.get("shape"))
        if kind == "enum" and (e.get("type") not in ENUM_TYPES or not isinstance(e.get("value"), str)):
            raise _fail(f, f"{where} enum {e.get('type')!r}.{e.get('value')!r}; valid types: {list(ENUM_TYPES)}")
        if kind == "value":
            _plain_value(f, where, e.get("value"))


def check_meta(f: Path, meta: dict) -> None:
    """bundle.json alone: every size, count and class, before any tensor is read."""
    dp = check_int(f, "dp", meta["dp"], 1, LIMITS["dp"])
    check_int(f, "rank", meta["rank"], 0, dp - 1, f" (dp {dp})")
    check_int(f, "batch_size", meta["batch_size"], 0, LIMITS["batch_size"])
    if not isinstance(meta["forward_mode"], str) or not meta["forward_mode"].isidentifier():
        raise _fail(f, f"forward_mode {str(meta['forward_mode'])[:80]!r} is not an enum member name")
    declared = _mapping(f, "tensors", meta["tensors"])
    for k, t in declared.items():
        if not isinstance(t, dict) or t.get("dtype") not in DTYPES:
            raise _fail(
                f, f"tensor {k!r} dtype {t.get('dtype') if isinstance(t, dict) else t!r}; valid: {list(DTYPES)}"
            )
        check_shape(f, f"tensor {k!r}", t.get("shape"))
    backend = _mapping(f, "backend", meta["backend"])
    if (backend.get("class"), backend.get("method")) != (None, None):  # None: no backend frame raised
        _class(f, "backend", backend, BACKEND_CLASSES)
        if backend.get("method") not in METHODS:
            raise _fail(f, f"backend.method {backend.get('method')!r}; valid: {list(METHODS)}")
    for part in ("backend", "runner"):
        for k, v in _mapping(f, f"{part}.attributes", meta[part].get("attributes", {})).items():
            _plain_value(f, f"{part}.attributes.{k}", v)
    spec = meta["spec_info"]
    if spec is not None:
        _class(f, "spec_info", spec, SPEC_CLASSES)
        _entries(f, "spec_info.attributes", spec.get("attributes"), declared)
        for k in ("declared", "missing"):
            if not isinstance(spec.get(k), list) or not all(isinstance(n, str) and n.isidentifier() for n in spec[k]):
                raise _fail(f, f"spec_info.{k} {str(spec.get(k))[:80]!r} is not a list of attribute names")
    _entries(f, "forward_batch", meta["forward_batch"], declared)
    fixed = meta.get("fixed")
    if isinstance(fixed, dict) and "metadata" in fixed:
        _entries(f, "fixed.metadata", fixed["metadata"], declared)
    _pools(f, meta["pools"])
    _mapping(f, "server_args", meta["server_args"])


def _pools(f: Path, pools: Any) -> None:
    """The pools the replay allocates: bounded, and their bytes within the engine's replay limit."""
    pools = _mapping(f, "pools", pools)
    table = _mapping(f, "pools.req_to_token", pools.get("req_to_token"))
    shape = table.get("shape")
    if not isinstance(shape, list) or len(shape) != 2:
        raise _fail(f, f"pools.req_to_token.shape {shape!r} is not [rows, columns]")
    rows = check_int(f, "pools.req_to_token.shape rows", shape[0], 1, LIMITS["req_to_token rows"])
    cols = check_int(f, "pools.req_to_token.shape columns", shape[1], 1, LIMITS["req_to_token columns"])
    check_int(f, "pools.req_to_token.size", table.get("size"), 1, rows)
    kv = _mapping(f, "pools.token_to_kv", pools.get("token_to_kv"))
    if kv.get("class") not in KV_POOLS:
        raise _fail(f, f"pools.token_to_kv.class {kv.get('class')!r}; valid: {list(KV_POOLS)}")
    size = check_int(f, "pools.token_to_kv.size", kv.get("size"), 1, LIMITS["slot"])
    check_int(f, "pools.token_to_kv.page_size", kv.get("page_size"), 1, 1, " (the replay builds page size 1)")
    layers = check_int(f, "pools.token_to_kv.layer_num", kv.get("layer_num"), 1, LIMITS["num_layers"])
    heads = check_int(f, "pools.token_to_kv.head_num", kv.get("head_num"), 1, LIMITS["num_kv_heads"])
    dim = check_int(f, "pools.token_to_kv.head_dim", kv.get("head_dim"), 1, LIMITS["head_dim"])
    v_dim = check_int(f, "pools.token_to_kv.v_head_dim", kv.get("v_head_dim", dim), 1, LIMITS["head_dim"])
    floats = [k for k, v in DTYPES.items() if v.is_floating_point]
    if kv.get("dtype") not in floats:
        raise _fail(f, f"pools.token_to_kv.dtype {kv.get('dtype')!r}; valid: {floats}")
    element = torch.empty(0, dtype=DTYPES[kv["dtype"]]).element_size()
    # +1 slot: the pool keeps slot 0 as padding; ReqToTokenPool holds int32
    total = rows * cols * 4 + (size + 1) * heads * (dim + v_dim) * layers * element
    check_int(f, "replay allocation (request table + KV pool) bytes", total, 0, bounds.MAX_REPLAY_BYTES)


def _read_tensors(d: Path, meta: dict) -> dict[str, torch.Tensor]:
    f = d / TENSORS_NAME
    if not f.is_file():
        raise _fail(f, "missing (a bundle directory holds bundle.json and tensors.safetensors)")
    check_int(f, "size in bytes", f.stat().st_size, 1, bounds.MAX_TENSOR_FILE_BYTES)
    declared = meta["tensors"]
    try:
        with safe_open(str(f), framework="pt") as st:
            keys = sorted(st.keys())
            if keys != sorted(declared):
                raise _fail(f, f"keys {keys} differ from bundle.json's {sorted(declared)}")
            for k in keys:  # the header's shapes and dtypes, before a tensor is read
                shape, dtype = list(st.get_slice(k).get_shape()), st.get_slice(k).get_dtype()
                want = declared[k]
                if shape != want["shape"] or _st_dtype(dtype) != want["dtype"]:
                    raise _fail(
                        f,
                        f"tensor {k!r} is {_st_dtype(dtype)} {shape}, bundle.json says "
                        f"{want['dtype']} {want['shape']} (tampered or truncated)",
                    )
            tensors = {k: st.get_tensor(k) for k in keys}
    except (SafetensorError, OSError, ValueError) as e:
        if isinstance(e, BundleError):
            raise
        raise _fail(f, f"not a readable safetensors file ({e})") from None
    for k in REQUIRED_TENSORS:
        if k not in tensors:
            raise _fail(f, f"required tensor {k!r} missing")
    return tensors


_ST_DTYPES = {"I64": "int64", "I32": "int32", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
_ST_DTYPES.update({"BOOL": "bool", "U8": "uint8"})


def _st_dtype(code: str) -> str:
    return _ST_DTYPES.get(code, code)


def _ints(f: Path, t: dict[str, torch.Tensor], key: str, dim: int = 1) -> torch.Tensor:
    v = t[key]
    if v.dtype.is_floating_point or v.dtype == torch.bool or v.dim() != dim:
        raise _fail(f, f"{key} is {str(v.dtype)[6:]} {list(v.shape)}; valid: a {dim}-D integer tensor")
    return v.to(torch.int64)


def check_batch(f: Path, meta: dict, t: dict[str, torch.Tensor]) -> None:
    """The batch fits its pools: rows and slots in range, one seq_len and pool index per request."""
    bs = meta["batch_size"]
    rows_n, cols = meta["pools"]["req_to_token"]["shape"]
    kv_size = meta["pools"]["token_to_kv"]["size"]
    seq_lens, pool_idx = _ints(f, t, "forward_batch.seq_lens"), _ints(f, t, "forward_batch.req_pool_indices")
    for k, v in (("seq_lens", seq_lens), ("req_pool_indices", pool_idx)):
        if v.numel() != bs:
            raise _fail(f, f"forward_batch.{k} has {v.numel()} entries, batch_size is {bs}")
    row_ids, rows = _ints(f, t, "req_to_token.row_ids"), _ints(f, t, "req_to_token.rows", dim=2)
    if rows.shape[0] != row_ids.numel() or rows.shape[1] > cols:
        raise _fail(
            f, f"req_to_token.rows {list(rows.shape)} does not fit row_ids {row_ids.numel()} and {cols} columns"
        )
    if row_ids.numel() and (int(row_ids.min()) < 0 or int(row_ids.max()) >= rows_n):
        raise _fail(f, f"req_to_token.row_ids {row_ids.tolist()[:16]} outside the pool's {rows_n} rows")
    if row_ids.numel() != len(set(row_ids.tolist())):
        raise _fail(f, f"req_to_token.row_ids {row_ids.tolist()[:16]} repeat a row")
    unknown = sorted(set(pool_idx.tolist()) - set(row_ids.tolist()))
    if unknown:
        raise _fail(f, f"forward_batch.req_pool_indices {unknown[:16]} have no row in req_to_token.rows")
    if seq_lens.numel() and (int(seq_lens.min()) < 0 or int(seq_lens.max()) > rows.shape[1]):
        raise _fail(
            f,
            f"forward_batch.seq_lens {seq_lens.tolist()[:16]} outside 0..{rows.shape[1]} "
            "(the request-table columns the bundle holds)",
        )
    for key, v in (
        ("req_to_token.rows slot", rows),
        ("forward_batch.out_cache_loc slot", t.get("forward_batch.out_cache_loc")),
    ):
        if v is not None and v.numel() and (int(v.min()) < 0 or int(v.max()) > kv_size):
            raise _fail(f, f"{key} {int(v.min())}..{int(v.max())} outside the KV pool's slots 0..{kv_size}")
    total = meta["forward_batch"].get("seq_lens_sum", {}).get("value")
    if total is not None and total != int(seq_lens.sum()):
        raise _fail(f, f"forward_batch.seq_lens_sum {total!r} is not the sum of seq_lens {int(seq_lens.sum())}")


def load_rank_bundle(path: str | Path) -> RankBundle:
    """Load and check the real-runtime rank bundle at ``path`` (its directory or its bundle.json)."""
    p = Path(path)
    d = p.parent if p.name == JSON_NAME else p
    if not d.is_dir():
        raise _fail(d, "no such bundle directory")
    f = d / JSON_NAME
    meta = _read_meta(d)
    check_meta(f, meta)
    tensors = _read_tensors(d, meta)
    check_batch(f, meta, tensors)
    return RankBundle(d, meta, tensors)
