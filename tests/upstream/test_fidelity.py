"""Fidelity of the workbench's contracts to the real releases (the shipped survey and seed replays),
and the spy that observes what a backend reads."""

from __future__ import annotations

from workbench.upstream.fidelity import fidelity, load_snapshot, observed_reads


def test_observed_reads_match_the_contract_each_backend_declares():
    from workbench.backends import backend_names, get_backend_class

    for be in backend_names():
        seen = observed_reads(be)
        assert seen["DECODE"] == seen["IDLE (padded)"] == get_backend_class(be).reads_spec_kv_indptr, be


def test_no_difference_from_the_shipped_survey_and_replays():
    result = fidelity()
    assert result["differences"] == []
    names = " ".join(c["check"] for c in result["checks"] if c["equal"])
    for needle in (
        "triton reads",
        "flashinfer reads",
        "fa3 reads",
        "pr-24860 draft-extend",
        "fallback kv_indptr",
        "exception vs real 0.5.13",
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
    """Our fallback runs on the table the real replay recorded (distinct real slot numbers in each
    row), so a fallback that reads the wrong row is caught."""
    from workbench.upstream import fidelity as fid_mod

    real = fid_mod.seq_lens_kv_metadata
    monkeypatch.setattr(fid_mod, "seq_lens_kv_metadata", lambda table, rows, lens: real(table, rows + 1, lens))
    diffs = {d["check"] for d in fidelity()["differences"]}
    assert diffs == {"seq_lens fallback kv_indices, padded idle bs 2, vs real 0.5.14"}
    rows = load_snapshot()["replay"]["0.5.14"]["req_to_token_rows"]
    assert rows["0"][0] != rows["1"][0] and 0 not in rows["0"] + rows["1"]


def test_a_replay_without_its_table_compares_nothing_for_the_fallback():
    snap = load_snapshot()
    del snap["replay"]["0.5.14"]["req_to_token_rows"]
    checks = {c["check"]: c for c in fidelity(snap)["checks"]}
    assert checks["seq_lens fallback kv_indices, padded idle bs 2, vs real 0.5.14"]["equal"] is False
