"""Loading a crash bundle: every check names the file and what is wrong (``BundleError``); sizes,
indices and the batch's consistency are checked (``bounds``) before the replay allocates anything."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from workbench.backends import backend_names
from workbench.debug import bounds
from workbench.debug.bundle import (
    ALLOWED_SPEC_CLASSES,
    DTYPES,
    ENUMS,
    FORMAT,
    FORMAT_VERSION,
    JSON_NAME,
    REQUIRED_KEYS,
    REQUIRED_TENSORS,
    TENSORS_NAME,
    BundleError,
    CrashBundle,
    dtype_name,
)

FIELD_KINDS = ("tensor", "tensor_omitted", "value", "enum", "none")


def _fail(path: Path, what: str) -> BundleError:
    return BundleError(f"crash bundle {path}: {what}")


def _read_meta(d: Path) -> dict:
    return bounds.read_meta(d / JSON_NAME, FORMAT, FORMAT_VERSION, REQUIRED_KEYS)


def _read_tensors(d: Path, meta: dict) -> dict[str, torch.Tensor]:
    f = d / TENSORS_NAME
    if not f.is_file():
        raise _fail(f, "missing (a bundle directory holds bundle.json and tensors.safetensors)")
    bounds.check_int(f, "size in bytes", f.stat().st_size, 1, bounds.MAX_TENSOR_FILE_BYTES)
    try:
        tensors = load_file(str(f))
    except (SafetensorError, OSError, ValueError) as e:
        raise _fail(f, f"not a readable safetensors file ({e})") from None
    declared = meta["tensors"]
    if set(declared) != set(tensors):
        raise _fail(f, f"keys {sorted(tensors)} differ from bundle.json's {sorted(declared)}")
    for k in REQUIRED_TENSORS:
        if k not in tensors:
            raise _fail(f, f"required tensor {k!r} missing")
    for k, t in tensors.items():
        want = declared[k]
        if list(t.shape) != list(want.get("shape", [])) or dtype_name(t) != want.get("dtype"):
            raise _fail(
                f,
                f"tensor {k!r} is {dtype_name(t)} {list(t.shape)}, bundle.json says "
                f"{want.get('dtype')} {want.get('shape')} (tampered or truncated)",
            )
    return tensors


def _check_backend(f: Path, meta: dict) -> None:

    if meta["backend"] not in backend_names():
        raise _fail(f, f"backend {meta['backend']!r}; valid: {backend_names()}")


def _check_spec(f: Path, meta: dict, t: dict[str, torch.Tensor]) -> None:
    spec = meta["spec_info"]
    if spec is None:
        return
    key = (spec.get("module"), spec.get("class"))
    if key not in ALLOWED_SPEC_CLASSES:
        raise _fail(
            f,
            f"spec_info class {key[0]}.{key[1]} is not an allowed spec-input class; allowed: "
            f"{sorted(f'{m}.{c}' for m, c in ALLOWED_SPEC_CLASSES)}",
        )
    for name, e in spec.get("fields", {}).items():
        kind = e.get("kind") if isinstance(e, dict) else None
        if kind not in FIELD_KINDS:
            raise _fail(f, f"spec_info field {name!r} has kind {kind!r}; valid: {list(FIELD_KINDS)}")
        if kind == "tensor" and e.get("key") not in t:
            raise _fail(f, f"spec_info field {name!r} names tensor {e.get('key')!r}, not in the bundle")
        if kind == "tensor_omitted" and e.get("dtype") not in DTYPES:
            raise _fail(f, f"spec_info field {name!r} dtype {e.get('dtype')!r}; valid: {list(DTYPES)}")
        if kind == "enum":
            if e.get("type") not in ENUMS:
                raise _fail(f, f"spec_info field {name!r} enum type {e.get('type')!r}; valid: {list(ENUMS)}")
            members = list(getattr(importlib.import_module(ENUMS[e["type"]][0]), ENUMS[e["type"]][1]).__members__)
            if e.get("value") not in members:
                raise _fail(f, f"spec_info field {name!r} value {e.get('value')!r}; valid: {members}")


def load_bundle(path: str | Path) -> CrashBundle:
    """Load and validate the bundle at ``path`` (its directory or its bundle.json)."""
    p = Path(path)
    d = p.parent if p.name == JSON_NAME else p
    if not d.is_dir():
        raise _fail(d, "no such bundle directory")
    f = d / JSON_NAME
    meta = _read_meta(d)
    bounds.check_meta(f, meta)  # every size and count, before any tensor is read
    _check_backend(f, meta)
    tensors = _read_tensors(d, meta)
    bounds.check_batch(f, meta, tensors)
    _check_spec(f, meta, tensors)
    bounds.check_spec_indices(f, meta, tensors)
    bounds.check_replay_bytes(f, meta, tensors)
    return CrashBundle(d, meta, tensors)
