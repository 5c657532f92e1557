"""The fix of PR #28221, applied from the workbench.

Two forms: ``EagleDraftExtendInput`` below is the class as PR #28221 left it (the ``pr-28221``
revision installs it), and the in-place patch of the regressed class of
``workbench.speculative.eagle_draft_extend_pr24860``: ``with fix_applied(): ...`` for a block (undone
on exit), or ``apply_fix`` / ``undo_fix`` for notebooks that show the class before and after.
``is_fix_applied`` says whether the patch is in. With ``kv_indptr`` None a backend takes the
seq_lens fallback (``workbench.backends.fallback``), exactly as before PR #24860.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from workbench.speculative import eagle_draft_extend_pr24860 as regressed

FIELD = "kv_indptr"
_GENERATED = ("__init__", "__repr__", "__eq__", "__dataclass_fields__", "__dataclass_params__", "__match_args__")


@dataclass
class EagleDraftExtendInput(regressed.EagleDraftExtendInput):
    """PR #24860's draft-extend spec_info plus the field backends read.

    None for draft-extend's idle batch (it has no tree indices); the backend then rebuilds
    plain metadata from ``seq_lens`` and ``req_to_token``.
    """

    kv_indptr: torch.Tensor | None = None


def _rebuild_dataclass(cls: type) -> None:
    for name in _GENERATED:
        if name in cls.__dict__:
            delattr(cls, name)
    dataclasses.dataclass(cls)


def is_fix_applied(cls: type = regressed.EagleDraftExtendInput) -> bool:
    """Whether ``cls`` declares ``kv_indptr`` (as a dataclass field)."""
    return FIELD in getattr(cls, "__dataclass_fields__", {})


@contextmanager
def fix_applied(cls: type = regressed.EagleDraftExtendInput) -> Iterator[None]:
    """The fix applied in place for the block: undone on exit, unless it was applied before."""
    added = apply_fix(cls)
    try:
        yield
    finally:
        if added:
            undo_fix(cls)


def apply_fix(cls: type = regressed.EagleDraftExtendInput) -> bool:
    """Add ``kv_indptr: torch.Tensor | None = None`` (Optional, as PR #28221's review asked) to ``cls`` in
    place. Returns False if present."""
    if is_fix_applied(cls):
        return False
    cls.__annotations__[FIELD] = "torch.Tensor | None"
    setattr(cls, FIELD, None)
    _rebuild_dataclass(cls)
    return True


def undo_fix(cls: type = regressed.EagleDraftExtendInput) -> bool:
    """Remove the field ``apply_fix`` added. Returns False if it was not there."""
    if not is_fix_applied(cls):
        return False
    del cls.__annotations__[FIELD]
    delattr(cls, FIELD)
    _rebuild_dataclass(cls)
    return True
