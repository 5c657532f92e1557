"""Crash bundles: the batch a forward raised on, written by the failing rank, loaded with validation.

A bundle is a directory ``crash-bundle-rank<R>/`` with ``bundle.json`` (what and where, the
spec_info class and its field values, attention dims, versions; no code) and
``tensors.safetensors`` (the ``ForwardBatch`` tensors, the ``req_to_token`` rows the batch
references and the spec_info tensors). Loading never runs code: JSON, safetensors, and a class
looked up in an allow-list of spec-input classes.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata
import json
import os
import platform
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

FORMAT = "eagle-workbench-crash-bundle"
FORMAT_VERSION = 1
JSON_NAME, TENSORS_NAME = "bundle.json", "tensors.safetensors"
MAX_SPEC_TENSOR_BYTES = 1 << 20  # larger spec_info tensors are stored as shape/dtype only
FB_TENSORS = ("input_ids", "positions", "seq_lens", "req_pool_indices", "out_cache_loc")
FB_OPTIONAL = ("extend_seq_lens", "extend_prefix_lens")
REQUIRED_TENSORS = tuple(f"forward_batch.{n}" for n in FB_TENSORS) + ("req_to_token.row_ids", "req_to_token.rows")
REQUIRED_KEYS = (
    "rank",
    "dp",
    "phase",
    "forward_mode",
    "batch_size",
    "backend",
    "attention",
    "req_to_token_shape",
    "spec_info",
    "revision",
    "fix_applied",
    "versions",
    "exception",
    "tensors",
)
# the spec-input classes a bundle may name: (module, class); nothing else is ever imported
ALLOWED_SPEC_CLASSES = {
    ("workbench.speculative.eagle_draft_extend_pr24860", "EagleDraftExtendInput"),
    ("workbench.speculative.eagle_draft_extend_pr28221", "EagleDraftExtendInput"),
    ("workbench.speculative.eagle_info", "EagleDraftInput"),
    ("workbench.speculative.eagle_info", "EagleVerifyInput"),
}
ENUMS = {"CaptureHiddenMode": ("workbench.engine.forward_mode", "CaptureHiddenMode")}
DTYPES = {
    "int64": torch.int64,
    "int32": torch.int32,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bool": torch.bool,
    "uint8": torch.uint8,
}


class BundleError(ValueError):
    """A crash bundle that cannot be trusted; the message names the file and what is wrong."""


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def versions() -> dict[str, str | None]:
    def meta(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "workbench": meta("eagle-workbench"),
        "torch": torch.__version__,
        "triton": meta("triton"),
        "python": platform.python_version(),
    }


def _field_entry(name: str, value: Any, tensors: dict[str, torch.Tensor]) -> dict:
    if value is None:
        return {"kind": "none"}
    if isinstance(value, torch.Tensor):
        if value.numel() * value.element_size() > MAX_SPEC_TENSOR_BYTES:
            return {"kind": "tensor_omitted", "shape": list(value.shape), "dtype": dtype_name(value)}
        tensors[f"spec_info.{name}"] = value
        return {"kind": "tensor", "key": f"spec_info.{name}"}
    if isinstance(value, enum.Enum):
        return {"kind": "enum", "type": type(value).__name__, "value": value.name}
    if isinstance(value, (bool, int, float, str)) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value)
    ):
        return {"kind": "value", "value": list(value) if isinstance(value, tuple) else value}
    raise TypeError(f"spec_info field {name!r}: cannot store a {type(value).__name__} in a crash bundle")


def _read_len(fb) -> int:
    """Columns of ``req_to_token`` the batch's metadata reads: max(seq_lens), plus the tree for verify."""
    if fb.seq_lens.numel() == 0:
        return 0
    extra = getattr(fb.spec_info, "draft_token_num", 0) if fb.forward_mode.is_target_verify() else 0
    return min(int(fb.seq_lens.max()) + extra, fb.req_to_token_pool.req_to_token.shape[1])


def save_bundle(
    directory: str | Path,
    *,
    rank: int,
    dp: int,
    phase: str | None,
    revision: str,
    fix_applied: bool,
    runner: Any,
    forward_batch: Any,
    exc: BaseException,
) -> Path:
    """Write ``directory/crash-bundle-rank<rank>/`` for the forward that raised ``exc``; returns its path.

    ``runner`` is the ``ModelRunner`` whose forward raised (attention dims, backend name);
    ``forward_batch`` the batch it was given.
    """
    fb, cfg = forward_batch, runner.model.config
    tensors: dict[str, torch.Tensor] = {}
    for name in FB_TENSORS + FB_OPTIONAL:
        value = getattr(fb, name)
        if value is not None:
            tensors[f"forward_batch.{name}"] = value
    table = fb.req_to_token_pool.req_to_token
    row_ids = torch.unique(fb.req_pool_indices.to(torch.int64))  # sorted, distinct
    tensors["req_to_token.row_ids"] = row_ids
    tensors["req_to_token.rows"] = table[row_ids, : _read_len(fb)]
    spec = fb.spec_info
    spec_entry = None
    if spec is not None:
        fields = {
            f.name: _field_entry(f.name, getattr(spec, f.name), tensors) for f in dataclasses.fields(spec) if f.init
        }
        spec_entry = {"module": type(spec).__module__, "class": type(spec).__qualname__, "fields": fields}
    tensors = {k: v.detach().to("cpu").clone() for k, v in tensors.items()}  # own storage each (safetensors)
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "rank": rank,
        "dp": dp,
        "phase": phase,
        "forward_mode": fb.forward_mode.name,
        "batch_size": fb.batch_size,
        "backend": runner.attn_backend.name,
        "attention": {
            "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim,
            "v_head_dim": cfg.head_dim,
            "num_layers": cfg.num_layers,
            "dtype": dtype_name(runner.kv_cache.k_buffers[0]),
            "device": "cpu",
        },
        "req_to_token_shape": list(table.shape),
        "forward_batch": {"capture_hidden_mode": fb.capture_hidden_mode.name, "is_padded_idle": fb.is_padded_idle},
        "spec_info": spec_entry,
        "revision": revision,
        "fix_applied": fix_applied,
        "versions": versions(),
        "exception": {
            "type": type(exc).__name__,
            "message": str(exc),
            "file": frame.filename,
            "line": frame.lineno,
            "function": frame.name,
        },
        "tensors": {k: {"dtype": dtype_name(v), "shape": list(v.shape)} for k, v in tensors.items()},
    }
    out = Path(directory) / f"crash-bundle-rank{rank}"
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / TENSORS_NAME))
    (out / JSON_NAME).write_text(json.dumps(meta, indent=1))
    return out


@dataclass
class CrashBundle:
    """A loaded, validated bundle: ``meta`` is bundle.json, ``tensors`` its safetensors by key."""

    path: Path
    meta: dict
    tensors: dict[str, torch.Tensor]

    def fb(self, name: str) -> torch.Tensor | None:
        """A ``ForwardBatch`` tensor by field name (None where the batch had none)."""
        return self.tensors.get(f"forward_batch.{name}")

    def spec_class(self) -> type | None:
        spec = self.meta["spec_info"]
        if spec is None:
            return None
        return getattr(importlib.import_module(spec["module"]), spec["class"])

    def spec_kwargs(self) -> dict[str, Any]:
        """The spec_info constructor arguments; omitted (over-size) tensors come back as zeros."""
        out: dict[str, Any] = {}
        for name, e in self.meta["spec_info"]["fields"].items():
            kind = e["kind"]
            if kind == "tensor":
                out[name] = self.tensors[e["key"]]
            elif kind == "tensor_omitted":
                out[name] = torch.zeros(e["shape"], dtype=DTYPES[e["dtype"]])
            elif kind == "enum":
                module, cls = ENUMS[e["type"]]
                out[name] = getattr(importlib.import_module(module), cls)[e["value"]]
            elif kind == "value":
                out[name] = e["value"]
            else:
                out[name] = None
        return out

    def summary(self) -> str:
        m, e = self.meta, self.meta["exception"]
        spec = m["spec_info"]
        return (
            f"{self.path}: rank {m['rank']} of dp {m['dp']}, {m['phase']} {m['forward_mode']} bs {m['batch_size']}, "
            f"backend {m['backend']}, revision {m['revision']} "
            f"(fix {'applied' if m['fix_applied'] else 'not applied'}), "
            f"spec_info {spec['class'] if spec else None}\n  {e['type']}: {e['message']}\n"
            f"  at {e['file']}:{e['line']} in {e['function']}"
        )


BUNDLE_DIR_ENV = "WB_BUNDLE_DIR"


def bundle_root() -> Path:
    """Where crash bundles are kept when the caller names no folder: ``$WB_BUNDLE_DIR``, else the
    nightly's log folder ``$WB_LOG_DIR``, else ``~/.cache/eagle-workbench/crash-bundles``. Never the
    temp dir: a bundle outlives the run that wrote it (it is what a person debugs later)."""
    root = os.environ.get(BUNDLE_DIR_ENV) or os.environ.get("WB_LOG_DIR")
    return Path(root) if root else Path.home() / ".cache" / "eagle-workbench" / "crash-bundles"


def new_bundle_dir() -> Path:
    """A fresh, not yet created folder under ``bundle_root()`` for one run's bundles."""
    return bundle_root() / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
