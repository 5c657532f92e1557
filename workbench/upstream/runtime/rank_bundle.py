"""A crash bundle written by a failing rank of the real runtime (runs inside the release's environment).

Imported by ``release_rank.py`` as a sibling (no workbench import). ``write`` walks the traceback of what the
event loop raised: the innermost frame holding a ``ForwardBatch`` gives the batch, the innermost
``self`` defined under ``sglang/srt/layers/attention/`` the backend and its failing method, and any
frame's ``ModelRunner`` the runner. It writes ``<dir>/crash-bundle-rank<R>/`` with ``bundle.json``
(the batch's fields, the spec input's class and its attributes present and missing, the backend's
class and sizes, the pools, the runner's plain settings, the server arguments, the release and the
code state, the traceback; no code) and ``tensors.safetensors`` (the batch's tensors, the spec
input's tensors, the request-table rows the batch reads, and the metadata the failing method builds
with the fix for the missing attribute applied, computed here in the run). Loaded and checked by
``workbench.debug.sglang_bundle``; replayed in the release's kernel by ``workbench.debug.sglang_replay``.
"""

import dataclasses
import enum
import json
import os
import traceback

FORMAT = "eagle-workbench-sglang-rank-bundle"
FORMAT_VERSION = 1
JSON_NAME, TENSORS_NAME = "bundle.json", "tensors.safetensors"
MAX_TENSOR_BYTES = 1 << 20  # a larger tensor is stored as its shape and dtype only
MAX_LIST = 4096  # a longer list of plain values is stored as its length only
ATTENTION_DIR = os.sep + os.path.join("sglang", "srt", "layers", "attention") + os.sep
# the fix that declares a missing kv_indptr on each spec-input class (fixes.py)
FIX_FOR = {"EagleVerifyInput": "verify-input", "EagleDraftExtendInput": "pr-28221"}
SETTINGS = ("SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET", "TORCH_COMPILE_DISABLE", "SGLANG_CPU_OMP_THREADS_BIND")


def _plain(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _entry(key: str, value, tensors: dict) -> dict:
    """One attribute as JSON: a tensor (stored under ``key``, or shape only), an enum, a plain value or
    list of them, or an object named by its class (not stored)."""
    import torch

    if value is None:
        return {"kind": "none"}
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        if value.numel() * value.element_size() > MAX_TENSOR_BYTES or value.layout != torch.strided:
            return {"kind": "tensor_omitted", "shape": list(value.shape), "dtype": dtype}
        tensors[key] = value.detach().to("cpu").contiguous().clone()
        return {"kind": "tensor", "key": key}
    if isinstance(value, enum.Enum):
        return {"kind": "enum", "type": type(value).__name__, "value": value.name}
    if _plain(value):
        return {"kind": "value", "value": value}
    if isinstance(value, (list, tuple)) and all(_plain(v) for v in value):
        if len(value) > MAX_LIST:
            return {"kind": "list_omitted", "length": len(value)}
        return {"kind": "value", "value": list(value)}
    return {"kind": "object", "type": f"{type(value).__module__}.{type(value).__qualname__}"}


def _scalars(obj) -> dict:
    """An object's own plain attributes (ints, floats, bools, strings, None)."""
    return {k: v for k, v in sorted(vars(obj).items()) if _plain(v) and not k.startswith("__")}


def _find(tb):
    """(forward batch, backend frame, model runner) from the innermost frames that hold them."""
    fb = backend_frame = runner = None
    while tb is not None:
        frame = tb.tb_frame
        local = frame.f_locals
        for name in ("forward_batch", "batch"):
            value = local.get(name)
            if value is not None and hasattr(value, "forward_mode") and dataclasses.is_dataclass(value):
                fb = value
        me = local.get("self")
        if me is not None and ATTENTION_DIR in frame.f_code.co_filename:
            backend_frame = (me, frame.f_code.co_name, frame.f_code.co_filename, tb.tb_lineno)
        for value in (me, getattr(me, "model_runner", None), local.get("model_runner")):
            if type(value).__name__ == "ModelRunner":
                runner = value
        tb = tb.tb_next
    return fb, backend_frame, runner


def _spec(spec, exc, tensors: dict) -> dict | None:
    if spec is None:
        return None
    cls = type(spec)
    declared = [f.name for f in dataclasses.fields(spec)] if dataclasses.is_dataclass(spec) else []
    attrs = {}
    for name in declared + [k for k in vars(spec) if k not in declared]:
        attrs[name] = _entry(f"spec_info.{name}", getattr(spec, name), tensors) if hasattr(spec, name) else None
    missing = sorted(n for n, e in attrs.items() if e is None)
    if isinstance(exc, AttributeError) and getattr(exc, "obj", None) is spec and exc.name not in missing:
        missing.append(exc.name)
    return {
        "module": cls.__module__,
        "class": cls.__qualname__,
        "declared": declared,
        "attributes": {n: e for n, e in attrs.items() if e is not None},
        "missing": missing,
    }


def _rows(fb, table, tensors: dict, extra: int) -> list:
    """The request-table rows the batch references, up to the columns its metadata reads."""
    import torch

    if fb.seq_lens is None or fb.seq_lens.numel() == 0:
        cols = 0
    else:
        cols = min(int(fb.seq_lens.max()) + extra, table.shape[1])
    row_ids = torch.unique(fb.req_pool_indices.to(torch.int64))
    tensors["req_to_token.row_ids"] = row_ids
    tensors["req_to_token.rows"] = table[row_ids, :cols].clone()
    return list(table.shape)


def _kv_pool(pool) -> dict:
    out = {"class": f"{type(pool).__module__}.{type(pool).__qualname__}"}
    for k in ("size", "page_size", "head_num", "head_dim", "v_head_dim", "layer_num", "start_layer"):
        value = getattr(pool, k, None)
        if isinstance(value, int):
            out[k] = value
    out["dtype"] = str(getattr(pool, "dtype", "")).removeprefix("torch.")
    return out


def _metadata(backend, tensors: dict, prefix: str) -> dict:
    """The backend's ``forward_metadata``: integer tensors stored, float ones as shape only."""
    meta = getattr(backend, "forward_metadata", None)
    if meta is None or not dataclasses.is_dataclass(meta):
        return {}
    out = {}
    for f in dataclasses.fields(meta):
        value = getattr(meta, f.name)
        if hasattr(value, "is_floating_point") and value.is_floating_point():
            out[f.name] = {"kind": "tensor_omitted", "shape": list(value.shape), "dtype": str(value.dtype)[6:]}
        else:
            out[f.name] = _entry(f"{prefix}.{f.name}", value, tensors)
    return out


def _fixed(backend_frame, fb, spec: dict | None, tensors: dict) -> dict | None:
    """The failing method run again in this process with the fix for the missing ``kv_indptr``
    applied: what the fixed run computes for this batch (None where no fix names the class)."""
    if spec is None or "kv_indptr" not in spec["missing"] or spec["class"] not in FIX_FOR or backend_frame is None:
        return None
    from . import fixes  # on use: only a crash the fix names runs it again

    name = FIX_FOR[spec["class"]]
    fixes.apply([name])
    backend, method = backend_frame[0], backend_frame[1]
    getattr(backend, method)(fb)
    return {"fix": name, "method": method, "metadata": _metadata(backend, tensors, "fixed_metadata")}


def write(directory: str, cfg: dict, exc: BaseException, code_state: dict) -> str | None:
    """Write this rank's bundle for ``exc`` under ``directory``; its path, or None when no frame held
    a forward batch (the crash was not in a forward)."""
    import torch
    from safetensors.torch import save_file

    tb = exc.__traceback__
    fb, backend_frame, runner = _find(tb)
    if fb is None:
        return None
    tensors: dict = {}
    fields = {}
    for f in dataclasses.fields(fb):
        if f.name in ("spec_info", "req_to_token_pool", "token_to_kv_pool", "attn_backend"):
            continue
        fields[f.name] = _entry(f"forward_batch.{f.name}", getattr(fb, f.name), tensors)
    spec = _spec(fb.spec_info, exc, tensors)
    draft = int(getattr(fb.spec_info, "draft_token_num", 0) or 0)
    backend = backend_frame[0] if backend_frame else getattr(fb, "attn_backend", None)
    owner = next(o for o in (runner, backend, fb) if o is not None and hasattr(o, "req_to_token_pool"))
    req_pool, kv_pool = owner.req_to_token_pool, owner.token_to_kv_pool
    table_shape = _rows(fb, req_pool.req_to_token, tensors, draft)
    frames = [
        {"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "").strip()}
        for f in traceback.extract_tb(tb)
    ]
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "rank": cfg["rank"],
        "dp": cfg["dp"],
        "forward_mode": fb.forward_mode.name,
        "batch_size": int(fb.batch_size),
        "forward_batch": fields,
        "spec_info": spec,
        "backend": {  # class None: no attention backend's frame raised (e.g. a peer's collective failed)
            "module": type(backend).__module__ if backend is not None else None,
            "class": type(backend).__qualname__ if backend is not None else None,
            "method": backend_frame[1] if backend_frame else None,
            "attributes": _scalars(backend) if backend is not None else {},
        },
        "pools": {
            "req_to_token": {"shape": table_shape, "size": int(req_pool.size)},
            "token_to_kv": _kv_pool(kv_pool),
        },
        "runner": {
            "attributes": _scalars(runner) if runner is not None else {},
            "model_path": getattr(getattr(runner, "model_config", None), "model_path", None),
            "is_draft_worker": bool(getattr(runner, "is_draft_worker", False)),
        },
        "server_args": cfg["server_args"],
        "release": {"version": cfg["version"], "src_root": cfg["src_root"]},
        "code_state": {**code_state, "settings": {k: os.environ.get(k) for k in SETTINGS}},
        "exception": {
            "type": type(exc).__name__,
            "message": str(exc),
            "name": getattr(exc, "name", None) if isinstance(exc, AttributeError) else None,
        },
        "raised_at": _in_sglang(frames),
        "frames": frames,
        "traceback": "".join(traceback.format_exception(exc)),
        "versions": {"torch": torch.__version__},
    }
    try:
        meta["fixed"] = _fixed(backend_frame, fb, spec, tensors)
    except Exception as err:  # noqa: BLE001 - the bundle says why the fixed metadata is absent
        meta["fixed"] = {"error": f"{type(err).__name__}: {err}"}
    meta["tensors"] = {k: {"dtype": str(v.dtype)[6:], "shape": list(v.shape)} for k, v in tensors.items()}
    out = os.path.join(directory, f"crash-bundle-rank{cfg['rank']}")
    os.makedirs(out, exist_ok=True)
    save_file(tensors, os.path.join(out, TENSORS_NAME))
    with open(os.path.join(out, JSON_NAME), "w") as f:
        json.dump(meta, f, indent=1)
    return out


def _in_sglang(frames: list) -> dict | None:
    """The innermost frame inside sglang: its absolute file, the file relative to the package, the line."""
    marker = os.sep + "sglang" + os.sep
    for frame in reversed(frames):
        if marker in frame["file"]:
            return {**frame, "relative": "sglang" + os.sep + frame["file"].split(marker, 1)[1]}
    return None
