"""The guard's end-to-end step on the real 0.5.14 (network: WB_NETWORK_TESTS=1): `workbench upstream lint
--sglang 0.5.14 --replay --end-to-end` confirms the verify input's finding end to end, and on the
between-PRs checkout the draft-extend input's (after the verify pass is fixed). Lint, replays and three
runtime runs: 65 s at commit 2a53c5c on 2 cores (load 1-2; minutes on a busy box), left out of .ci/run's
budget, which runs the same runtime paths in tests/upstream/runtime/test_runtime_network.py; the
nightly's network job runs it.
On 0.5.23 the live finding is confirmed end to end too (106 s at load 16-18)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from workbench.cli import main as workbench_main
from workbench.upstream.context import UpstreamContext
from workbench.upstream.guard import check
from workbench.upstream.runtime.suite import between_prs_checkout

pytestmark = pytest.mark.network
READ = ("sglang/srt/layers/attention/triton_backend.py", 593)
KEY = "triton|IDLE|{}|kv_indptr|TritonAttnBackend.init_forward_metadata"


def test_lint_end_to_end_confirms_the_verify_input_on_0_5_14(tmp_path: Path) -> None:
    out = tmp_path / "lint.json"
    assert (
        workbench_main(["upstream", "lint", "--sglang", "0.5.14", "--replay", "--end-to-end", "--json", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    f = next(f for f in result["findings"] if f["key"] == KEY.format("EagleVerifyInput"))
    assert (f["read_file"], f["read_line"]) == READ
    assert f["verdict"] == "confirmed end to end" and f["verdict_by"] == "real runtime"
    assert "verify pass" in f["verdict_reason"] and f["reachability"]["end_to_end"]["reached"] is True
    (run,) = f["end_to_end"]["runs"]
    assert run["fixes"] == [] and run["crash"]["spec_info"] == "EagleVerifyInput"
    e2e = result["results"][0]["end_to_end"]
    assert e2e["status"] == "ok" and e2e["records"][run["record"]]["processes"]["left_running"] == []


def test_the_draft_extend_finding_is_confirmed_between_the_prs() -> None:
    with tempfile.TemporaryDirectory(prefix="wb-between-") as tmp:
        between_prs_checkout(UpstreamContext(), "0.5.14", Path(tmp))
        result = check(UpstreamContext(env_release="0.5.14"), src=Path(tmp), replay=True, end_to_end=True)
    f = next(f for f in result["findings"] if f.key == KEY.format("EagleDraftExtendInput"))
    assert f.verdict == "confirmed end to end" and "draft-extend pass" in f.verdict_reason
    assert [r["fixes"] for r in f.end_to_end["runs"]] == [[], ["verify-input"]]
    assert result["results"][0]["end_to_end"]["status"] == "ok"


def test_lint_end_to_end_confirms_the_live_finding_on_0_5_23(tmp_path: Path) -> None:
    """The newest release: the guard's live finding (read at triton_backend.py:891) is raised by 0.5.23's
    own runtime, with its device equivalences; the gate passes it as live, not filed upstream (exit 0)."""
    out = tmp_path / "lint.json"
    argv = ["upstream", "lint", "--sglang", "0.5.23", "--replay", "--end-to-end", "--fail-on", "new"]
    assert workbench_main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    f = next(f for f in result["findings"] if f["key"] == KEY.format("EagleVerifyInput"))
    assert (f["read_file"], f["read_line"]) == (READ[0], 891)
    assert f["verdict"] == "confirmed end to end" and f["verdict_by"] == "real runtime"
    (run,) = f["end_to_end"]["runs"]
    assert run["fixes"] == [] and run["crash"]["phase"] == "verify" and run["crash"]["rank"] == 1
    record = result["results"][0]["end_to_end"]["records"][run["record"]]
    assert [e["name"] for e in record["equivalences"] if e["installed"]] == [
        "dp-padding-fill-value",
        "verify-tree-mask-mode",
    ]
    assert record["processes"]["left_running"] == []
    assert [r["key"] for r in result["not_filed"]] == [
        KEY.format(c) for c in ("EagleVerifyInput", "FrozenKVMTPVerifyInput", "PPSpecRelayInput")
    ]
