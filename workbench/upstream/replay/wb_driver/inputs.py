"""The spec input of a replay, built with the release's own constructor where it has one.

IDLE: the class's ``create_idle_input(...)`` (what the workers install on an idle rank), its
parameters answered from the replay's settings, inside ``cuda_to_cpu`` (some releases hard-code
``device="cuda"`` there). Other modes, or a class without an idle constructor: an instance whose
required fields the replay fills (tensors shaped for the batch: ``kv_indptr`` / ``kv_indices`` are
the batch's real ``[0, cumsum(seq_lens)]`` and req_to_token slots); the release builds these inputs
on the GPU inside its workers, so ``built_by`` says "fields filled by the replay".
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
import sys
import typing

from .setup import NUM_DRAFT, NUM_STEPS, TOPK


def _known(ctx) -> dict:
    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    return {
        "device": torch.device("cpu"),
        "hidden_size": ctx.runner.model_config.hidden_size,
        "dtype": ctx.runner.model_config.dtype,
        "capture_hidden_mode": CaptureHiddenMode.LAST,
        "topk": TOPK,
        "spec_steps": NUM_STEPS,
        "num_steps": NUM_STEPS,
        "num_verify_tokens": NUM_DRAFT,
        "num_draft_tokens": NUM_DRAFT,
        "draft_token_num": NUM_DRAFT,
        "block_size": NUM_DRAFT,
        "vocab_size": ctx.runner.model_config.vocab_size,
    }


def spec_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)


def build(ctx, module: str, name: str, idle: bool, shape: dict, record: dict | None = None) -> tuple[object, str]:
    """(instance, built_by). `shape`: the batch's ``seq_lens`` / ``req_pool_indices`` / ``num_tokens``;
    `record` receives the idle constructor's arguments (JSON-ready) when it was used."""
    cls = spec_class(module, name)
    known = _known(ctx)
    why = f"{name} has no create_idle_input"
    if idle and hasattr(cls, "create_idle_input"):
        params = inspect.signature(cls.create_idle_input).parameters
        missing = [
            p
            for p, v in params.items()
            if p not in known
            and v.default is inspect.Parameter.empty
            and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)
        ]
        if not missing:
            args = {p: known[p] for p in params if p in known}
            if record is not None:
                record["idle_input_args"] = {k: _plain(v) for k, v in args.items()}
            return cls.create_idle_input(**args), f"{name}.create_idle_input"
        why = f"{name}.create_idle_input needs {missing}, which the replay cannot answer"
    elif not idle:
        why = f"{name} for a non-idle batch is built on the GPU by its worker"
    return filled(ctx, cls, known, shape, record), f"fields filled by the replay ({why})"


def _plain(value):
    """A constructor argument as JSON: a device or dtype by name, an enum member by name."""
    if isinstance(value, enum.Enum):
        return value.name
    if hasattr(value, "is_floating_point") or type(value).__name__ in ("device", "dtype"):
        return str(value).replace("torch.", "")
    return value


def _hints(cls) -> dict:
    """Field types; a string annotation is looked up by name in the class's module (never evaluated)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - forward references the release never resolves
        pass
    scope = vars(sys.modules[cls.__module__])
    out = {}
    for klass in reversed(cls.__mro__):
        for name, ann in vars(klass).get("__annotations__", {}).items():
            out[name] = scope.get(ann, ann) if isinstance(ann, str) else ann
    return out


def filled(ctx, cls: type, known: dict, shape: dict, record: dict | None = None):
    """An instance of `cls` with every required field or parameter given a value for this batch;
    `record` receives the arguments as JSON (``encode``) for a reproducer to build the same one."""
    hints = _hints(cls)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # a dataclass's generated one too
    names = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    args = {n: value_for(ctx, n, hints.get(n), known, shape) for n in names}
    if record is not None:
        record["init_args"] = {k: encode(v) for k, v in args.items()}
    return cls(**args)


def encode(value):
    """A constructor argument as JSON a reproducer decodes: a tensor as {"tensor": shape, "dtype",
    "values"}, an enum member as {"enum": [module, class, member]}, a device or dtype by name."""
    if hasattr(value, "tolist") and hasattr(value, "dtype") and hasattr(value, "shape"):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""), "values": value.tolist()}
    if isinstance(value, enum.Enum):
        return {"enum": [type(value).__module__, type(value).__name__, value.name]}
    return _plain(value)


def value_for(ctx, name: str, hint, known: dict, shape: dict):
    """A value for field `name` consistent with the batch (see the module docstring)."""
    torch = ctx.torch
    if name in known:
        return known[name]
    seq = shape["seq_lens"]
    bs = len(seq)
    i64 = dict(dtype=torch.int64, device="cpu")
    if name in ("kv_indptr", "kv_indices"):
        indptr = torch.zeros(bs + 1, dtype=torch.int32)
        indptr[1:] = torch.tensor(seq, dtype=torch.int32).cumsum(0) if bs else indptr[1:]
        if name == "kv_indptr":
            return indptr
        table = ctx.runner.req_to_token_pool.req_to_token
        rows = [table[r, :n] for r, n in zip(shape["req_pool_indices"], seq, strict=True)]
        return torch.cat(rows).to(torch.int64) if rows else torch.empty(0, **i64)
    if name in ("seq_lens", "seq_lens_cpu"):
        return torch.tensor(seq, **i64)
    if name == "seq_lens_sum":
        return int(sum(seq))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _member(hint, shape.get("mode", ""), shape.get("spec_class", ""))
    text = str(hint).lower() if hint is not None else ""
    if "tensor" in text or name.endswith(("_mask", "_index", "_indices", "_ids", "_lens", "_token", "_tokens")):
        return _tensor(torch, name, bs)
    if "bool" in text:
        return False
    if "int" in text:
        return 1
    if "float" in text:
        return 0.0
    if "list" in text:
        return []
    return None


def _member(enum_cls, mode: str, cls_name: str):
    """The member of an enum field (a spec-input type) that fits the class and the forward mode:
    `UnoForwardInput` in TARGET_VERIFY -> `UNO_VERIFY` (the class's prefix, VERIFY or DRAFT)."""
    members = list(enum_cls)
    found = re.match(r"[A-Z]+[a-z]*", cls_name)
    prefix = found.group().upper() if found else ""
    want = "VERIFY" if mode == "TARGET_VERIFY" else "DRAFT"
    ranked = [m for m in members if m.name.startswith(prefix) and want in m.name]
    ranked += [m for m in members if m.name.startswith(prefix)] + [m for m in members if want in m.name]
    return (ranked or members)[0]


def _tensor(torch, name: str, bs: int):
    if name.endswith("_mask"):
        return torch.ones(bs * NUM_DRAFT * 64, dtype=torch.bool)
    if name.startswith("retrieve_"):
        return torch.full((bs, NUM_DRAFT), -1, dtype=torch.int64)
    if name in ("draft_token", "positions"):
        return torch.zeros(bs * NUM_DRAFT, dtype=torch.int64)
    if name == "hidden_states":
        return torch.zeros(bs, 64)
    if name in ("topk_p", "topk_index"):
        return torch.zeros(bs, TOPK, dtype=torch.float32 if name == "topk_p" else torch.int64)
    return torch.zeros(bs, dtype=torch.int64)
