"""``workbench upstream explore`` on the real 0.5.23 runtime, a small subset (network: the release's
wheel and release environment, cached under ~/.cache/eagle-workbench). Run with WB_NETWORK_TESTS=1."""

from __future__ import annotations

import os
import tempfile

import pytest

from workbench.upstream.context import UpstreamContext

pytestmark = pytest.mark.network


def test_explore_triton_dp2_subset() -> None:
    from workbench.upstream.runtime.explore import explore

    before = set(os.listdir(tempfile.gettempdir()))
    result = explore(UpstreamContext(), "0.5.23", algorithms=["EAGLE3"], backends=["triton"], dps=[2], max_new_tokens=4)
    cells = {c["key"]: c for c in result["cells"]}
    assert set(cells) == {f"EAGLE3/triton/dp2/{idle}/overlap-{ov}" for idle in ("start", "mid") for ov in ("on", "off")}
    start = cells["EAGLE3/triton/dp2/start/overlap-off"]
    # the verify-pass crash the shipped 0.5.23 record holds, on the idle rank, at the same line
    assert start["verdict"] == "crashed" and start["known"] is True
    assert (start["crash"]["rank"], start["crash"]["phase"], start["crash"]["forward_mode"]) == (1, "verify", "IDLE")
    assert start["crash"]["line"] == 891 and start["crash"]["file"].endswith("triton_backend.py")
    # 0.5.23 turns the overlap schedule off for speculative decoding on CPU: the first overlap-on cell is run
    # and measured so (its scheduler's enable_overlap False), a limit naming the release's line
    on = cells["EAGLE3/triton/dp2/start/overlap-on"]
    assert on["verdict"] == "limit" and on["reason"].startswith("arg_groups/speculative_hook.py:")
    assert "as overlap-off: crashed: AttributeError" in on["reason"]
    assert cells["EAGLE3/triton/dp2/mid/overlap-on"]["reason"].startswith("as EAGLE3/triton/dp2/start/overlap-on")
    assert cells["EAGLE3/triton/dp2/mid/overlap-off"]["verdict"] == "crashed"
    for c in cells.values():
        assert c["verdict"] in ("ok", "crashed", "limit"), (c["key"], c["reason"])
        if c["record"] is not None:
            assert c["record"]["processes"]["left_running"] == []
    assert sorted(set(os.listdir(tempfile.gettempdir())) - before) == []


def test_explore_eagle_dp3_mid_head_split_crash_and_its_fix() -> None:
    """The explore's EAGLE/triton/dp3/mid cell: every rank's first draft decode divides by ``kv_group_num`` 0
    (the EAGLE-1 draft's heads split over the full TP group, its KV pool over attention TP); with
    ``--fix llama-attn-tp`` and the idle rank's two fixes the run is ok, equal to HF and to EAGLE at DP 1, and
    the draft accepts as many tokens as at DP 1."""
    from workbench.upstream.runtime import run_runtime

    before = set(os.listdir(tempfile.gettempdir()))
    kw = {"algorithm": "EAGLE", "disable_overlap_schedule": True, "max_new_tokens": 8}
    released = run_runtime(UpstreamContext(), "0.5.23", dp=3, idle="mid", reference=False, **kw)
    failures = [released["crash"], *released["rank_failures"]]
    assert released["status"] == "crashed" and sorted(f["rank"] for f in failures) == [0, 1, 2]
    for f in failures:
        assert (f["phase"], f["forward_mode"], f["exception_type"]) == ("draft", "DECODE", "ZeroDivisionError")
    at = released["crash"]["raised_at"]
    assert (at["file"], at["line"], at["function"]) == (
        "sglang/kernels/ops/attention/decode_attention.py",
        125,
        "_grouped_head_tiles",
    )
    fixes = ["llama-attn-tp", "eagle-idle-batch", "verify-input"]
    fixed = run_runtime(UpstreamContext(), "0.5.23", dp=3, idle="mid", fixes=fixes, **kw)
    dp1 = run_runtime(UpstreamContext(), "0.5.23", dp=1, reference=False, **kw)
    assert fixed["status"] == "ok" and fixed["reference"]["equal"] and fixed["outputs"] == dp1["outputs"]
    assert fixed["metrics"]["accept_length_mean"] == dp1["metrics"]["accept_length_mean"]
    assert [c["name"] for c in fixed["shim_guard"]["fixed"]] == [
        "LlamaAttention.__init__",
        "LlamaAttention.forward",
        "LlamaModel.__init__",
        "EagleVerifyInput.kv_indptr",
    ]
    for rec in (released, fixed, dp1):
        assert rec["processes"]["left_running"] == [] and rec["shim_guard"]["violations"] == []
    assert sorted(set(os.listdir(tempfile.gettempdir())) - before) == []
