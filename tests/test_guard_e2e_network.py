"""End-to-end verdicts for lint findings on the real 0.5.14 runtime (network: WB_NETWORK_TESTS=1; three
runs, about 2 min, left out of .ci/run's budget, which already runs the same paths in
tests/test_runtime_network.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from workbench.upstream.checkout import make_checkout
from workbench.upstream.runtime.e2e import confirm_end_to_end

pytestmark = pytest.mark.network
READ = "sglang/srt/layers/attention/triton_backend.py:593"
FINDING = {
    "backend": "triton",
    "forward_mode": "IDLE",
    "class": "EagleVerifyInput",
    "attribute": "kv_indptr",
    "read": READ,
}


def test_verify_input_finding_is_confirmed_end_to_end_on_0_5_14() -> None:
    v = confirm_end_to_end(FINDING, "0.5.14")
    assert v["verdict"] == "confirmed end to end" and len(v["runs"]) == 1 and "verify pass" in v["reason"]


def test_draft_extend_finding_is_confirmed_between_the_prs_after_fixing_verify() -> None:
    with tempfile.TemporaryDirectory(prefix="wb-between-") as tmp:
        make_checkout("0.5.14", Path(tmp), drop_field=("EagleDraftExtendInput", "kv_indptr"))
        v = confirm_end_to_end({**FINDING, "class": "EagleDraftExtendInput"}, "0.5.14", sglang_src=Path(tmp))
    assert v["verdict"] == "confirmed end to end" and [r["fixes"] for r in v["runs"]] == [[], ["verify-input"]]
    assert "draft-extend pass" in v["reason"]
