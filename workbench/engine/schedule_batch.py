"""Requests and the running batch (``ScheduleBatch``), with ``filter`` / ``merge`` as upstream."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch

from workbench.models.tokenizer import EOS_ID


@dataclass
class Req:
    rid: int
    prompt_ids: List[int]
    max_new_tokens: int
    output_ids: List[int] = field(default_factory=list)
    req_pool_idx: int = -1
    finished: bool = False

    def append(self, tokens: List[int]) -> None:
        """Add generated tokens, stopping at max_new_tokens or end-of-text."""
        for t in tokens:
            if self.finished:
                return
            self.output_ids.append(int(t))
            if len(self.output_ids) >= self.max_new_tokens or t == EOS_ID:
                self.finished = True


@dataclass
class ScheduleBatch:
    """The running requests of one rank. seq_lens counts tokens whose KV both models hold; the
    EAGLE state (verified_id, topk_p, topk_index, hidden) is what the next draft starts from."""

    reqs: List[Req]
    req_pool_indices: torch.Tensor  # (bs,) int64
    seq_lens: torch.Tensor  # (bs,) int64
    verified_id: torch.Tensor  # (bs,) int64, the last token (its KV not yet computed)
    topk_p: Optional[torch.Tensor] = None  # (bs, topk)
    topk_index: Optional[torch.Tensor] = None  # (bs, topk)
    hidden: Optional[torch.Tensor] = None  # (bs, H) draft state that predicted topk

    def __len__(self) -> int:
        return len(self.reqs)

    def filter(self, keep: torch.Tensor) -> "ScheduleBatch":
        """keep: (bs,) bool."""
        idx = keep.nonzero().flatten()
        opt = lambda t: None if t is None else t[idx]  # noqa: E731
        return ScheduleBatch(
            [self.reqs[i] for i in idx.tolist()], self.req_pool_indices[idx], self.seq_lens[idx],
            self.verified_id[idx], opt(self.topk_p), opt(self.topk_index), opt(self.hidden),
        )

    @staticmethod
    def merge(a: Optional["ScheduleBatch"], b: Optional["ScheduleBatch"]) -> Optional["ScheduleBatch"]:
        if a is None or len(a) == 0:
            return b
        if b is None or len(b) == 0:
            return a
        cat = lambda x, y: None if x is None else torch.cat((x, y))  # noqa: E731
        return ScheduleBatch(
            a.reqs + b.reqs, cat(a.req_pool_indices, b.req_pool_indices), cat(a.seq_lens, b.seq_lens),
            cat(a.verified_id, b.verified_id), cat(a.topk_p, b.topk_p), cat(a.topk_index, b.topk_index),
            cat(a.hidden, b.hidden),
        )
