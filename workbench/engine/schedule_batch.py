"""Requests and the running batch (``ScheduleBatch``), with ``filter`` / ``merge`` as upstream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from workbench.models.tokenizer import EOS_ID


@dataclass
class Req:
    rid: int
    prompt_ids: list[int]
    max_new_tokens: int
    output_ids: list[int] = field(default_factory=list)
    req_pool_idx: int = -1
    finished: bool = False

    def append(self, tokens: list[int]) -> None:
        """Add generated tokens, stopping at max_new_tokens or end-of-text."""
        for t in tokens:
            if self.finished:
                return
            self.output_ids.append(int(t))
            if len(self.output_ids) >= self.max_new_tokens or t == EOS_ID:
                self.finished = True


@dataclass
class ScheduleBatch:
    """The running requests of one rank. seq_lens counts tokens whose KV both models hold.

    ``spec_info`` (an ``EagleDraftInput`` under EAGLE3, None for plain greedy) holds the state
    the next draft starts from; it is filtered and merged with the batch (``filter_batch`` /
    ``merge_batch``), as upstream.
    """

    reqs: list[Req]
    req_pool_indices: torch.Tensor  # (bs,) int64
    seq_lens: torch.Tensor  # (bs,) int64
    output_ids: torch.Tensor  # (bs,) int64, the last sampled token (its KV not yet computed)
    spec_info: Any | None = None

    def __len__(self) -> int:
        return len(self.reqs)

    def filter(self, keep: torch.Tensor) -> ScheduleBatch:
        """keep: (bs,) bool."""
        idx = keep.nonzero().flatten()
        return ScheduleBatch(
            [self.reqs[i] for i in idx.tolist()],
            self.req_pool_indices[idx],
            self.seq_lens[idx],
            self.output_ids[idx],
            None if self.spec_info is None else self.spec_info.filter_batch(idx),
        )

    @staticmethod
    def merge(a: ScheduleBatch | None, b: ScheduleBatch | None) -> ScheduleBatch | None:
        if a is None or len(a) == 0:
            return b
        if b is None or len(b) == 0:
            return a
        return ScheduleBatch(
            a.reqs + b.reqs,
            torch.cat((a.req_pool_indices, b.req_pool_indices)),
            torch.cat((a.seq_lens, b.seq_lens)),
            torch.cat((a.output_ids, b.output_ids)),
            None if a.spec_info is None else a.spec_info.merge_batch(b.spec_info),
        )
