"""The EAGLE round state rides on the batch (``batch.spec_info``) and verify's result filters
as one object: filtering and merging keep every field of a request on the same row."""

from __future__ import annotations

import torch

from workbench.engine.schedule_batch import Req, ScheduleBatch
from workbench.speculative.eagle_info import EagleDraftInput, EagleVerifyOutput


def _batch(rids, h=3, k=2):
    n = len(rids)
    rid = torch.tensor(rids)
    spec = EagleDraftInput(
        topk_p=rid.float().unsqueeze(1).expand(n, k) / 100,
        topk_index=rid.unsqueeze(1).expand(n, k) + 1,
        hidden_states=rid.float().unsqueeze(1).expand(n, h),
        verified_id=rid + 1000,
    )
    return ScheduleBatch([Req(r, [1], 4) for r in rids], rid + 10, rid + 20, rid + 1000, spec)


def _rows_agree(b: ScheduleBatch) -> None:
    for i, r in enumerate(b.reqs):
        s = b.spec_info
        assert (int(b.req_pool_indices[i]), int(b.seq_lens[i]), int(b.output_ids[i])) == (
            r.rid + 10,
            r.rid + 20,
            r.rid + 1000,
        )
        assert int(s.verified_id[i]) == r.rid + 1000 and (s.topk_index[i] == r.rid + 1).all()
        assert (s.hidden_states[i] == r.rid).all() and torch.allclose(s.topk_p[i], torch.tensor(r.rid / 100))


def test_filter_and_merge_keep_the_round_state_with_its_request():
    b = _batch([3, 5, 7, 9]).filter(torch.tensor([True, False, True, False]))
    assert [r.rid for r in b.reqs] == [3, 7]
    _rows_agree(b)
    merged = ScheduleBatch.merge(b, _batch([11]))
    assert [r.rid for r in merged.reqs] == [3, 7, 11]
    _rows_agree(merged)


def test_verify_output_filters_every_field_together():
    bs, n = 3, 4
    base = torch.arange(bs).view(bs, 1)
    res = EagleVerifyOutput(
        tree_tokens=base * 10 + torch.arange(n),
        path=base.expand(bs, n).clone(),
        accept_length=torch.arange(bs),
        bonus=torch.arange(bs) + 50,
        aux_states=base.float().view(bs, 1, 1).expand(bs, n, 6),
        slots=base * 100 + torch.arange(n),
    )
    kept = res.filter(torch.tensor([False, True, True]))
    assert kept.accept_length.tolist() == [1, 2] and kept.bonus.tolist() == [51, 52]
    assert kept.tree_tokens[:, 0].tolist() == [10, 20] and kept.slots[:, 0].tolist() == [100, 200]
    assert kept.path[:, 0].tolist() == [1, 2] and kept.aux_states[:, 0, 0].tolist() == [1.0, 2.0]
