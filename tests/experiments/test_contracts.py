"""Contract fuzzer: the only failing cells are the pr-24860 draft-extend hole and the idle verify
input (upstream's live finding, every revision), each predicted by the declared contracts (and
required to fail), and a new spec-input type that lacks a field some backend reads is flagged."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.experiments.contracts import SpecCase, ended, format_failures, predicted, run_matrix, unexpected
from workbench.speculative.spec_info import SpecInput, SpecInputType


def test_only_the_pr24860_hole_and_the_idle_verify_input_fail():
    rows = run_matrix()
    bad = {
        (r["revision"], r["backend"], r["spec_input"], r["mode"], r["exception"]) for r in rows if r["status"] != "ok"
    }
    assert {(r["status"], r["exception"]) for r in rows} == {("ok", None), ("crashed", "AttributeError")}
    hole = {
        ("pr-24860", be, "EagleDraftExtendInput (draft-extend)", "IDLE (padded)", "AttributeError")
        for be in ("triton", "flashinfer")
    }
    verify = {
        (rev, be, "EagleVerifyInput", "IDLE (padded)", "AttributeError")
        for rev in ("pre-24860", "pr-24860", "pr-28221")
        for be in ("triton", "flashinfer")
    }
    assert bad == hole | verify
    msgs = {r["message"] for r in rows if r["status"] != "ok"}
    assert msgs == {f"'{c}' object has no attribute 'kv_indptr'" for c in ("EagleDraftExtendInput", "EagleVerifyInput")}
    # every (revision, backend) pair was probed in every mode
    assert {r["mode"] for r in rows} == {
        "DECODE",
        "IDLE (padded)",
        "IDLE (size 0)",
        "TARGET_VERIFY",
        "DRAFT_EXTEND",
        "EXTEND",
    }
    assert len({(r["revision"], r["backend"]) for r in rows}) == 12
    # the declared contracts predict exactly these cells: the hole is required to fail on both backends
    assert {
        (r["revision"], r["backend"], r["spec_input"], r["mode"], r["expected_exception"])
        for r in rows
        if r["expected_status"] != "ok"
    } == bad
    assert unexpected(rows) == []


def test_a_backend_whose_contract_and_code_disagree_is_unexpected(monkeypatch):
    """flashinfer declaring it never reads spec_info.kv_indptr (while it does): its hole cells (the
    draft-extend and the verify idle input) are unexpected; and if it stopped reading it while
    declaring it does, the passing cells are unexpected."""
    from workbench.backends.flashinfer import FlashInferBackend

    monkeypatch.setattr(FlashInferBackend, "reads_spec_kv_indptr", False)
    odd = unexpected(run_matrix(backends=["flashinfer"], revisions=["pr-24860"]))
    assert [(r["spec_input"], r["mode"], ended(r), predicted(r)) for r in odd] == [
        ("EagleVerifyInput", "IDLE (padded)", "crashed (AttributeError)", "ok"),
        ("EagleDraftExtendInput (draft-extend)", "IDLE (padded)", "crashed (AttributeError)", "ok"),
    ]
    assert "2 unexpected" in format_failures(odd) and "(contracts predict ok)" in format_failures(odd)
    monkeypatch.setattr(FlashInferBackend, "reads_spec_kv_indptr", True)
    monkeypatch.setattr(FlashInferBackend, "init_forward_metadata", lambda self, fb: None)
    odd = unexpected(run_matrix(backends=["flashinfer"], revisions=["pr-24860"]))
    assert [(r["spec_input"], r["mode"], ended(r), predicted(r)) for r in odd] == [
        ("EagleVerifyInput", "IDLE (padded)", "ok", "crashed (AttributeError)"),
        ("EagleDraftExtendInput (draft-extend)", "IDLE (padded)", "ok", "crashed (AttributeError)"),
    ]


@dataclass
class HalfDraftInput(SpecInput):
    """A draft-decode input that carries kv_indptr but forgot kv_indices."""

    kv_indptr: torch.Tensor | None = None

    def __post_init__(self):
        super().__init__(SpecInputType.EAGLE_DRAFT)


def test_fuzzer_flags_a_spec_input_missing_a_field_a_backend_reads():
    def make(mode, fb):
        return HalfDraftInput(kv_indptr=torch.zeros(fb.batch_size + 1, dtype=torch.int64))

    rows = run_matrix(revisions=["pr-28221"], extra_cases=[SpecCase("HalfDraftInput", ("DECODE",), make)])
    flagged = {r["backend"] for r in rows if r["spec_input"] == "HalfDraftInput" and r["exception"] == "AttributeError"}
    assert flagged == {"triton", "flashinfer"}  # they read spec_info.kv_indices; fa3 / torch_native never do
    assert {r["backend"] for r in unexpected(rows)} == flagged  # the contracts declare kv_indptr only
    assert all(
        "kv_indices" in r["message"] for r in rows if r["spec_input"] == "HalfDraftInput" and r["status"] != "ok"
    )
