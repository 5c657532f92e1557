"""The lint's and the family's known misses, each on the real release file where real code confirmed it
(the oracle's mutants, `workbench upstream recall --oracle`), and the false positive real code refuted.

Network: each needs the release's wheel (cached under ~/.cache/eagle-workbench once fetched); the
synthetic versions of each rule are in test_upstream_lint.py and test_upstream_family.py."""

from __future__ import annotations

import os

import pytest

from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.sources.trees import release_tree
from workbench.upstream.static.family import analyse_family
from workbench.upstream.static.lint import MODES_FILE, analyse
from workbench.upstream.static.recall import _removal
from workbench.upstream.static.site_mutants import build_mutants, set_batch_idle_none

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(
        os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the release's wheel; WB_NETWORK_TESTS=1"
    ),
    pytest.mark.timeout(900),
]
CTX = UpstreamContext(log=quiet)
ATTN = "sglang/srt/layers/attention/"


def _batch_none(version: str, attr: str) -> dict:
    """The family of `version` with `ForwardBatch.init_new` leaving `attr` None on IDLE (the oracle's mutant)."""
    tree = release_tree(CTX, version)
    mutated = tree.with_changes({MODES_FILE: set_batch_idle_none(tree.files[MODES_FILE], MODES_FILE, attr)})
    return analyse_family(mutated)


def _at(findings: list[dict], attr: str, spec_class: str, path: str, line: int) -> list[dict]:
    return [
        f
        for f in findings
        if f["attr"] == attr and f["spec_class"] == spec_class and f["read_file"] == path and f["read_line"] == line
    ]


def test_0_5_14_dflash_verify_input_installed_as_self() -> None:
    """`batch.spec_info = self` in `DFlashVerifyInput.prepare_for_verify` (dflash_info.py:65) is its
    TARGET_VERIFY install; the replay confirmed `custom_mask` removed from it at triton_backend.py:701 and
    `spec_input_type` removed at flashinfer_backend.py:1721 (the `== SpecInputType.DFLASH_VERIFY` test)."""
    tree = release_tree(CTX, "0.5.14")
    installs = analyse(tree, paths=False)["installs"]
    mine = [i for i in installs if i["class"] == "DFlashVerifyInput" and i["install_line"] == 65]
    # `batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY`
    assert [(i["install_file"], i["install_function"], i["modes"]) for i in mine] == [
        ("sglang/srt/speculative/dflash_info.py", "DFlashVerifyInput.prepare_for_verify", ["IDLE", "TARGET_VERIFY"])
    ]
    for attr, path, line in (
        ("custom_mask", f"{ATTN}triton_backend.py", 701),
        ("spec_input_type", f"{ATTN}flashinfer_backend.py", 1721),
    ):
        mutated = tree.with_changes(_removal(tree, "DFlashVerifyInput", attr, {}))
        hits = _at(analyse(mutated, paths=False)["findings"], attr, "DFlashVerifyInput", path, line)
        assert [h["mode"] for h in hits] == ["TARGET_VERIFY"], (attr, hits)
        assert hits[0]["install_line"] == 65


def test_0_5_23_frozen_kv_mtp_verify_input_reaches_target_verify_three_calls_deep() -> None:
    """`batch.spec_info = verify_input` (frozen_kv_mtp_worker_v2.py:809, the `FrozenKVMTPVerifyInput` its
    draft worker's `draft` builds at :527) gets TARGET_VERIFY in `eagle_prepare_for_verify` (eagle_utils.py:381),
    reached by verify -> run_eagle_verify -> eagle_prepare_for_verify; the replay confirmed `custom_mask`
    removed from it (raised at triton_backend.py:1051, one of its site lines) and `ragged_verify_layout` at
    hybrid_linear_attn_backend.py:285: the lint reports both there."""
    tree = release_tree(CTX, "0.5.23")
    installs = analyse(tree, paths=False)["installs"]
    mine = [
        i
        for i in installs
        if i["class"] == "FrozenKVMTPVerifyInput"
        and i["install_line"] == 809
        and i["install_file"].endswith("frozen_kv_mtp_worker_v2.py")
        and i["built_at"].endswith("frozen_kv_mtp_worker_v2.py:527")
    ]
    assert [i["modes"] for i in mine] == [["IDLE", "TARGET_VERIFY"]]
    for attr, path, line in (
        ("custom_mask", f"{ATTN}triton_backend.py", 1051),
        ("ragged_verify_layout", f"{ATTN}hybrid_linear_attn_backend.py", 285),
    ):
        mutated = tree.with_changes(_removal(tree, "FrozenKVMTPVerifyInput", attr, {}))
        hits = _at(analyse(mutated, paths=False)["findings"], attr, "FrozenKVMTPVerifyInput", path, line)
        assert "TARGET_VERIFY" in {h["mode"] for h in hits}, (attr, hits)


def test_0_5_23_seq_lens_sum_none_handed_to_torch_empty_in_a_callee() -> None:
    """`forward_batch.seq_lens_sum` None on IDLE, passed to `_get_kv_indices_scratch` (aiter_backend.py:2072)
    and used as `torch.empty`'s size there (aiter_backend.py:1304): the replay raised TypeError there."""
    fam = _batch_none("0.5.23", "seq_lens_sum")
    hits = [
        f
        for f in fam["findings"]
        if f["attr"] == "seq_lens_sum" and f["read_file"] == f"{ATTN}aiter_backend.py" and f["deref_line"] == 1304
    ]
    assert hits and {h["deref_op"] for h in hits} == {"torch.empty() size"}
    assert {h["read_function"] for h in hits} == {"AiterAttnBackend._get_kv_indices_scratch"}
    assert 2072 in {h["read_line"] for h in hits} and all("passed as required_tokens" in h["passed"] for h in hits)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_batch_size_none_is_set_again_by_the_dp_padding(version: str) -> None:
    """`batch_size` None on IDLE is not reported: `prepare_mlp_sync_batch` sets it on every path an IDLE
    batch takes before the padding (the replay ran the metadata clean on trtllm_mha, triton, intel_amx)."""
    fam = _batch_none(version, "batch_size")
    assert "batch_size" not in fam["batch_idle_values"]
    assert [f for f in fam["findings"] if f["attr"] == "batch_size"] == []
    # the same rule keeps a field the padding sets on some IDLE paths only
    assert _batch_none(version, "seq_lens_sum")["batch_idle_values"]["seq_lens_sum"]["state"] == "None"


def test_0_5_23_the_oracle_builds_no_batch_the_release_never_builds() -> None:
    """The oracle's cases of the seven 0.5.23 mutants confirmed on a batch the release never builds: draft
    inputs on DRAFT_EXTEND_V2 (only `EagleDraftExtendInput` is installed there, eagle_worker_common.py:139)
    and `UnoDraftInput` on IDLE (UNO refuses idle batches, uno_worker_v2.py:229); the verify input the
    frozen-KV MTP worker installs keeps TARGET_VERIFY."""
    built = {m.name: m for m in build_mutants(release_tree(CTX, "0.5.23"))["mutants"]}

    def batches(name: str) -> list[str]:
        return [c["batch"] for c in built[name].cases]

    for cls in ("UnoDraftInput", "DFlashDraftInputV2", "EagleDraftInput", "FrozenKVMTPDraftInput"):
        assert "DRAFT_EXTEND_V2" not in batches(f"flashinfer_mla_backend.py num_tokens_per_req: removed from {cls}")
    assert batches("flashinfer_mla_backend.py num_tokens_per_req: removed from EagleDraftInput") == ["IDLE padded"]
    assert batches("flashinfer_backend.py kv_indptr: guard removed, UnoDraftInput lacks it") == []
    assert batches("qwen_sparse_attn_backend.py draft_token_num: guard removed, DFlashDraftInputV2 lacks it") == [
        "IDLE padded"
    ]
    assert batches("triton_backend.py custom_mask: removed from FrozenKVMTPVerifyInput") == ["TARGET_VERIFY"]
    assert batches("flashinfer_mla_backend.py num_tokens_per_req: removed from EagleDraftExtendInput") == [
        "DRAFT_EXTEND_V2"
    ]
