"""Code states a run reproduces (docs/design.md §2): which class the draft-extend pass installs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.engine.forward_mode import CaptureHiddenMode
from workbench.speculative import eagle_draft_extend_pr24860 as regressed
from workbench.speculative import eagle_draft_extend_pr28221 as fix
from workbench.speculative.eagle_info import EagleDraftInput
from workbench.speculative.spec_info import SpecInput


@dataclass(frozen=True)
class Revision:
    name: str
    summary: str
    draft_extend_class: type

    def draft_extend_input(
        self, hidden_states: torch.Tensor, verified_id: torch.Tensor, accept_length: torch.Tensor
    ) -> SpecInput:
        """spec_info of a (non-idle) draft-extend pass. hidden_states (T, 3H), verified_id (T,), accept_length (bs,)."""
        return self.draft_extend_class(
            hidden_states=hidden_states,
            verified_id=verified_id,
            accept_length=accept_length,
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )

    def idle_draft_extend_input(self, hidden_size: int, dtype: torch.dtype, topk: int) -> SpecInput:
        """spec_info of an idle rank's draft-extend pass, built as upstream does."""
        if self.draft_extend_class is EagleDraftInput:
            return EagleDraftInput.create_idle_input(
                torch.get_default_device(), hidden_size, dtype, topk, CaptureHiddenMode.LAST
            )
        return self.draft_extend_class.create_idle_input(
            torch.get_default_device(), hidden_size, dtype, CaptureHiddenMode.LAST
        )

    @property
    def has_kv_indptr(self) -> bool:
        """Whether the draft-extend spec_info answers ``.kv_indptr`` (at this moment, patches included)."""
        probe = self.idle_draft_extend_input(8, torch.float32, 1)
        return hasattr(probe, "kv_indptr")


REVISIONS: dict[str, Revision] = {
    r.name: r
    for r in (
        Revision("pre-24860", "draft-extend carries an EagleDraftInput (kv_indptr None)", EagleDraftInput),
        Revision("pr-24860", "EagleDraftExtendInput without kv_indptr", regressed.EagleDraftExtendInput),
        Revision(
            "pr-28221", "EagleDraftExtendInput with kv_indptr: Optional[Tensor] = None", fix.EagleDraftExtendInput
        ),
    )
}


def get_revision(name: str) -> Revision:
    if name not in REVISIONS:
        raise ValueError(f"unknown revision {name!r}; valid revisions: {', '.join(REVISIONS)}")
    return REVISIONS[name]
