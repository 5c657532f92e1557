"""Fidelity of the workbench's contracts to the real releases (shipped snapshot of the survey and
replays), and the spy that observes what a backend reads."""

from __future__ import annotations

from workbench.upstream.fidelity import fidelity, load_snapshot, observed_reads


def test_observed_reads_match_the_contract_each_backend_declares():
    from workbench.backends import backend_names, get_backend_class

    for be in backend_names():
        seen = observed_reads(be)
        assert seen["DECODE"] == seen["IDLE (padded)"] == get_backend_class(be).reads_spec_kv_indptr, be


def test_no_difference_from_the_shipped_upstream_snapshot():
    result = fidelity()
    assert result["differences"] == []
    names = " ".join(c["check"] for c in result["checks"] if c["equal"])
    for needle in (
        "triton reads",
        "flashinfer reads",
        "fa3 reads",
        "pr-24860 draft-extend",
        "fallback kv_indptr",
        "outcome vs real 0.5.13",
    ):
        assert needle in names


def test_a_changed_upstream_fact_is_reported_as_a_difference():
    snap = load_snapshot()
    snap["replay"]["0.5.14"]["kv_indptr"] = [0, 1, 1]
    snap["survey"]["0.5.14"]["backends"]["flashattention_backend.py"]["reads"] = True
    diffs = {d["check"] for d in fidelity(snap)["differences"]}
    assert diffs == {
        "seq_lens fallback kv_indptr, padded idle bs 2, vs real 0.5.14",
        "fa3 reads spec_info.kv_indptr in decode/idle vs flashattention_backend.py 0.5.14",
    }


def test_a_fallback_reading_a_live_requests_row_is_a_difference(monkeypatch):
    """The padded-idle table holds real slot numbers outside row 0, so a fallback that reads the
    wrong row is caught (on an all-zero table any builder would agree with the real 0.5.14)."""
    import torch

    from workbench.upstream import fidelity as fid_mod

    real = fid_mod.seq_lens_kv_metadata
    monkeypatch.setattr(fid_mod, "seq_lens_kv_metadata", lambda table, rows, lens: real(table, rows + 1, lens))
    diffs = {d["check"] for d in fidelity()["differences"]}
    assert diffs == {"seq_lens fallback kv_indices, padded idle bs 2, vs real 0.5.14"}
    assert fid_mod.padded_idle_table()[1:3].count_nonzero() == 13 and torch.equal(
        fid_mod.padded_idle_table()[0], torch.zeros(8, dtype=torch.int32)
    )
