"""The two fixes the real-runtime lane can apply, as patches inside the rank processes.

Runs inside the replay environment (no workbench import); the workbench names the fixes from
``FIXES`` (``workbench.upstream.runtime.launch`` reads this file's table without importing it).

- ``verify-input``: the smallest fix for the verify-pass crash on an idle DP rank
  (``'EagleVerifyInput' object has no attribute 'kv_indptr'``): ``kv_indptr: Optional[torch.Tensor]
  = None`` declared on ``EagleVerifyInput``, so the triton backend's idle branch takes the seq_lens
  fallback, as it does for a spec input that declares the field.
- ``pr-28221``: PR #28221's fix, the same field on ``EagleDraftExtendInput``.

Each adds the field to the real dataclass in place (annotation, class default, the dataclass
re-generated with its own parameters), before the scheduler is built. A release that already
declares the field is left alone and the record says so.
"""

import dataclasses
import importlib

FIELD = "kv_indptr"
MODULE = "sglang.srt.speculative.eagle_info"
FIXES = {
    "verify-input": ("EagleVerifyInput", "the verify pass's idle input gets kv_indptr = None (seq_lens fallback)"),
    "pr-28221": ("EagleDraftExtendInput", "PR #28221: the draft-extend input gets kv_indptr = None"),
}
_GENERATED = (
    "__init__",
    "__repr__",
    "__eq__",
    "__hash__",
    "__dataclass_fields__",
    "__dataclass_params__",
    "__match_args__",
)
_PARAMS = ("init", "repr", "eq", "order", "unsafe_hash", "frozen")


def declares(cls) -> bool:
    """Whether ``cls`` declares ``kv_indptr`` as a dataclass field."""
    return FIELD in getattr(cls, "__dataclass_fields__", {})


def add_field(cls) -> None:
    """``kv_indptr: Optional[torch.Tensor] = None`` appended to the dataclass ``cls``, in place."""
    params = cls.__dataclass_params__
    kwargs = {p: getattr(params, p) for p in _PARAMS if hasattr(params, p)}
    cls.__annotations__[FIELD] = "Optional[torch.Tensor]"
    setattr(cls, FIELD, None)
    for name in _GENERATED:
        if name in cls.__dict__:
            delattr(cls, name)
    dataclasses.dataclass(cls, **kwargs)


def apply(names: list) -> list:
    """Apply the named fixes; return what each did (for the run record)."""
    unknown = [n for n in names if n not in FIXES]
    if unknown:
        raise ValueError(f"unknown fix {unknown}; known: {sorted(FIXES)}")
    module = importlib.import_module(MODULE)
    out = []
    for name in names:
        cls_name, what = FIXES[name]
        cls = getattr(module, cls_name)
        present = declares(cls)
        if not present:
            add_field(cls)
        out.append(
            {
                "fix": name,
                "class": f"{MODULE}.{cls_name}",
                "what": what,
                "applied": not present,
                "note": "the release already declares the field" if present else "field added in place",
                "declares_after": declares(cls),
            }
        )
    return out
