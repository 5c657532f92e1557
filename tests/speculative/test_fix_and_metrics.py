"""The fix as a class and as an in-place patch; revisions; metrics helpers."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from workbench.engine.forward_mode import CaptureHiddenMode
from workbench.engine.metrics import Metrics, loop_period, loop_summary
from workbench.speculative import eagle_draft_extend_pr24860 as regressed
from workbench.speculative import eagle_draft_extend_pr28221 as fix
from workbench.speculative.revisions import REVISIONS, get_revision


def test_revisions_decide_the_draft_extend_class_and_the_field():
    assert [r for r in REVISIONS] == ["pre-24860", "pr-24860", "pr-28221"]
    assert {n: r.has_kv_indptr for n, r in REVISIONS.items()} == {
        "pre-24860": True,
        "pr-24860": False,
        "pr-28221": True,
    }
    assert get_revision("pr-24860").draft_extend_class.__name__ == "EagleDraftExtendInput"
    assert get_revision("pr-28221").draft_extend_class.__name__ == "EagleDraftExtendInput"
    with pytest.raises(ValueError, match="unknown revision 'x'; valid revisions: pre-24860, pr-24860, pr-28221"):
        get_revision("x")


def test_fixed_class_declares_an_optional_tensor_field_defaulting_to_none():
    f = {x.name: x for x in dataclasses.fields(fix.EagleDraftExtendInput)}["kv_indptr"]
    assert f.default is None
    assert f.type == "torch.Tensor | None"  # PEP 604 spelling of the Optional the review of PR #28221 asked for
    assert eval(f.type, vars(fix)) == typing.Optional[torch.Tensor]  # noqa: UP045 (the same type, in the review's words)
    idle = fix.EagleDraftExtendInput.create_idle_input("cpu", 8, torch.float32, CaptureHiddenMode.LAST)
    assert idle.kv_indptr is None


def test_in_place_patch_adds_and_removes_the_field():
    cls = regressed.EagleDraftExtendInput
    before = cls.create_idle_input("cpu", 8, torch.float32, CaptureHiddenMode.LAST)
    with pytest.raises(AttributeError, match="'EagleDraftExtendInput' object has no attribute 'kv_indptr'"):
        before.kv_indptr
    try:
        assert fix.apply_fix() and not fix.apply_fix()
        assert fix.is_fix_applied()
        obj = cls.create_idle_input("cpu", 8, torch.float32, CaptureHiddenMode.LAST)
        assert obj.kv_indptr is None and "kv_indptr=None" in repr(obj)
        assert cls(kv_indptr=torch.tensor([0, 1])).kv_indptr.tolist() == [0, 1]
    finally:
        assert fix.undo_fix() and not fix.undo_fix()
    assert not fix.is_fix_applied()
    with pytest.raises(AttributeError):
        cls.create_idle_input("cpu", 8, torch.float32, CaptureHiddenMode.LAST).kv_indptr
    with pytest.raises(TypeError):
        cls(kv_indptr=None)


def test_loop_detection():
    assert loop_period(list(b"abc" * 20)) == 3
    assert loop_period(list(b"x = 1\n" * 5)) == 6
    assert loop_period(list(b"def f(x):\n    return x + 1\n\nclass A:\n    pass\n")) is None
    s = loop_summary([list(b"ab" * 20), list(b"no loop in this sentence at all, really"), None])
    assert s["share"] == 0.5 and s["prompts"] == [0]


def test_metrics_summary_names_its_denominator():
    m = Metrics(proposed_per_step=15, max_depth=5)
    m.add_accepts([4, 0, 2])
    out = m.summary(tokens_generated=9, wall_s=3.0)
    assert out["accept_length_per_step"] == [5, 1, 3] and out["accept_length_mean"] == 3.0
    assert out["acceptance_rate"] == pytest.approx(6 / 45)
    assert "num_draft_tokens - 1" in out["acceptance_rate_denominator"]
    assert out["acceptance_per_position"] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3, 0.0])
    assert out["tokens_per_s"] == 3.0
