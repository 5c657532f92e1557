"""``SpecConfig``: the shape of EAGLE3's draft and the code state whose draft-extend class runs."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.speculative.revisions import Revision


@dataclass(frozen=True)
class SpecConfig:
    """As upstream's ``speculative_num_steps`` / ``speculative_eagle_topk`` /
    ``speculative_num_draft_tokens``; ``revision`` picks the draft-extend spec_info class."""

    revision: Revision
    steps: int
    topk: int
    num_draft_tokens: int
