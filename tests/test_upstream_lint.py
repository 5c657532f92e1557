"""The contract lint: offline on synthetic sources; on real 0.5.14 checkouts (network)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from workbench.cli import main as workbench_main
from workbench.upstream.lint import ATTN_DIR, MODES_FILE, SPEC_DIR, analyse, finding_key, query
from workbench.upstream.lint_modes import parse_forward_modes

MODES = textwrap.dedent("""
    class ForwardMode(IntEnum):
        EXTEND = auto()
        DECODE = auto()
        IDLE = auto()
        TARGET_VERIFY = auto()
        DRAFT_EXTEND_V2 = auto()
        def is_decode_or_idle(self):
            return self == ForwardMode.DECODE or self == ForwardMode.IDLE
        def is_target_verify(self):
            return self == ForwardMode.TARGET_VERIFY
        def is_extend(self, include_v2: bool = False):
            return self == ForwardMode.EXTEND or (include_v2 and self == ForwardMode.DRAFT_EXTEND_V2)
        def is_idle(self):
            return self == ForwardMode.IDLE
""")

SPEC = textwrap.dedent("""
    from dataclasses import dataclass
    class SpecInput:
        custom_mask = None
        def __init__(self, spec_input_type):
            self.spec_input_type = spec_input_type
        def is_draft_input(self):
            return self.spec_input_type in {SpecInputType.DRAFT, SpecInputType.DRAFT_EXTEND}
    @dataclass
    class DraftInput(SpecInput):
        kv_indptr: "Tensor" = None
        kv_indices: "Tensor" = None
        hidden_states: "Tensor" = None
        def __post_init__(self):
            super().__init__(SpecInputType.DRAFT)
    @dataclass
    class DraftExtendInput(SpecInput):
        hidden_states: "Tensor" = None
        KV_FIELD
        def __post_init__(self):
            super().__init__(SpecInputType.DRAFT_EXTEND)
        @classmethod
        def create_idle_input(cls, device):
            return cls()
        def prepare(self):
            self.positions = None
    class VerifyInput(SpecInput):
        def __init__(self):
            super().__init__(SpecInputType.VERIFY)
            self.draft_token_num = 4
""")

WORKER = textwrap.dedent("""
    class Worker:
        def _draft_extend_for_decode(self, batch):
            extend_input = DraftExtendInput(hidden_states=None)
            self.prepare_for_draft_extend(extend_input, batch)
        def prepare_for_draft_extend(self, draft_extend_input, batch):
            batch.spec_info = draft_extend_input
            batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        def idle_draft(self, batch):
            batch.spec_info = DraftInput.create_idle_input(device="cpu")
        def verify(self, batch):
            batch.spec_info = VerifyInput()
            batch.forward_mode = ForwardMode.TARGET_VERIFY
""")

BACKEND = textwrap.dedent("""
    class Updater:
        def __init__(self):
            self.update = self.update_single
        def update(self, spec_info):
            raise NotImplementedError()
        def update_single(self, spec_info):
            if spec_info is None or getattr(spec_info, "kv_indptr", None) is None:
                pass
            else:
                x = spec_info.kv_indptr
    class Backend:
        def __init__(self):
            self.updater = Updater()
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            if forward_batch.forward_mode.is_decode_or_idle():
                if spec_info is None or spec_info.kv_indptr is None:
                    self._fallback(forward_batch)
                else:
                    kv_indptr = spec_info.kv_indptr
                self.updater.update(spec_info=forward_batch.spec_info)
            elif forward_batch.forward_mode.is_target_verify():
                mask = spec_info.custom_mask
                n = spec_info.draft_token_num
                if hasattr(spec_info, "seq_lens_cpu"):
                    y = spec_info.seq_lens_cpu
                if isinstance(spec_info, DraftInput):
                    z = spec_info.kv_indices
            else:
                w = getattr(spec_info, "num_tokens_per_req", None)
        def _fallback(self, forward_batch):
            if forward_batch.spec_info.is_draft_input():
                q = forward_batch.spec_info.hidden_states
""")


def sources(with_field: bool) -> dict[str, str]:
    field = "kv_indptr: 'Tensor' = None" if with_field else "pass"
    return {
        MODES_FILE: MODES,
        f"{SPEC_DIR}info.py": SPEC.replace("KV_FIELD", field),
        f"{SPEC_DIR}worker.py": WORKER,
        f"{ATTN_DIR}toy_backend.py": BACKEND,
    }


def test_forward_mode_predicates_are_evaluated_from_source() -> None:
    fm = parse_forward_modes(MODES)
    assert fm.members == ["EXTEND", "DECODE", "IDLE", "TARGET_VERIFY", "DRAFT_EXTEND_V2"]
    assert fm.accepts("is_decode_or_idle") == {"DECODE", "IDLE"}
    assert fm.accepts("is_extend") == {"EXTEND"}
    assert fm.accepts("is_extend", {"include_v2": True}) == {"EXTEND", "DRAFT_EXTEND_V2"}
    assert fm.accepts("is_missing") is None


def test_lint_finds_the_regression_and_nothing_else() -> None:
    result = analyse(sources(with_field=False), "toy")
    keys = sorted((f["forward_mode"], f["class"], f["attribute"], f["read"]) for f in result["findings"])
    # The plain `spec_info.kv_indptr is None` read at line 18 in the decode/idle branch, for the idle
    # DraftExtendInput the worker installs through prepare_for_draft_extend (IDLE).
    assert keys == [("IDLE", "DraftExtendInput", "kv_indptr", f"{ATTN_DIR}toy_backend.py:18")]
    finding = result["findings"][0]
    assert finding["install"] == f"{SPEC_DIR}worker.py:7"
    assert finding["backend"] == "toy" and finding["backend_class"] == "Backend"
    assert finding_key(finding) == "toy|Backend|IDLE|DraftExtendInput|kv_indptr"
    assert query({"findings": result["findings"]}, attribute="kv_indptr", mode="IDLE") == [finding]


def test_lint_is_clean_once_the_class_declares_the_field() -> None:
    assert analyse(sources(with_field=True), "toy")["findings"] == []


def test_reads_carry_modes_and_guards() -> None:
    reads = analyse(sources(with_field=False), "toy")["backends"][f"{ATTN_DIR}toy_backend.py:Backend"]["reads"]
    by_line = {(r["line"], r["attr"]): r for r in reads}
    assert by_line[(18, "kv_indptr")]["guarded"] is False
    assert by_line[(18, "kv_indptr")]["modes"] == ["DECODE", "IDLE"]
    assert by_line[(21, "kv_indptr")]["guard"] == "guarded"  # only reached past the plain read
    assert by_line[(8, "kv_indptr")]["guard"] == "getattr default"  # Updater via self.update dispatch
    assert by_line[(11, "kv_indptr")]["guard"] == "guarded"  # the else of the getattr None check
    assert by_line[(24, "custom_mask")]["modes"] == ["TARGET_VERIFY"]
    assert by_line[(27, "seq_lens_cpu")]["guarded"] is True  # under hasattr
    assert by_line[(29, "kv_indices")]["only"] == [["isinstance", ("DraftInput",), True]]
    assert by_line[(31, "num_tokens_per_req")]["modes"] == ["DRAFT_EXTEND_V2", "EXTEND"]
    assert by_line[(34, "hidden_states")]["only"] == [["pred", "is_draft_input", True]]


def test_spec_input_attributes_and_installs() -> None:
    result = analyse(sources(with_field=False), "toy")
    classes = result["spec_inputs"]
    ext = classes["DraftExtendInput"]
    assert {"hidden_states", "custom_mask", "spec_input_type", "create_idle_input", "prepare"} <= set(ext["attrs"])
    assert "kv_indptr" not in ext["attrs"] and "positions" in ext["set_later"]
    assert ext["type_predicates"] == {"is_draft_input": True}
    assert "draft_token_num" in classes["VerifyInput"]["attrs"]
    installs = {(i["class"], tuple(i["modes"]), i["mode_from"]) for i in result["installs"]}
    assert installs == {
        ("DraftExtendInput", ("DRAFT_EXTEND_V2", "IDLE"), "assigned"),
        ("DraftInput", ("IDLE",), "idle input"),
        ("VerifyInput", ("TARGET_VERIFY",), "assigned"),
    }


def test_bad_source_dir_is_refused(tmp_path: Path, capsys) -> None:
    assert workbench_main(["upstream", "lint", "--sglang-src", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "no sglang/srt package" in err


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the sglang wheel; WB_NETWORK_TESTS=1"
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("version", ["0.5.14"])
def test_real_checkout_between_prs(version: str, tmp_path: Path) -> None:
    from workbench.upstream.checkout import make_checkout

    between = make_checkout(version, tmp_path / "between", ("EagleDraftExtendInput", "kv_indptr"))
    clean = make_checkout(version, tmp_path / "clean")
    out = tmp_path / "between.json"
    assert workbench_main(["upstream", "lint", "--sglang-src", str(between), "--replay", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    hits = {f["backend"]: f for f in query(result, attribute="kv_indptr", cls="EagleDraftExtendInput", mode="IDLE")}
    triton = hits["triton"]
    assert triton["read"] == "sglang/srt/layers/attention/triton_backend.py:593"
    assert triton["install"] == "sglang/srt/speculative/base_spec_worker.py:114"
    assert triton["triage"]["status"] == "confirmed", triton["triage"]
    assert "has no attribute 'kv_indptr'" in triton["triage"]["reason"]
    # From 0.5.14 on, flashinfer reads the field through getattr(..., None): guarded, no finding.
    assert "flashinfer" not in hits and {"flashinfer_mla", "wave"} <= set(hits)
    clean_result = workbench_main(
        ["upstream", "lint", "--sglang-src", str(clean), "--json", str(tmp_path / "clean.json")]
    )
    assert clean_result == 0
    clean_findings = json.loads((tmp_path / "clean.json").read_text())
    assert query(clean_findings, attribute="kv_indptr", cls="EagleDraftExtendInput") == []


def test_nightly_gate_fails_on_untriaged_or_newly_confirmed_findings() -> None:
    from workbench.upstream.lane import gate, load_triage

    finding = analyse(sources(with_field=False), "toy")["findings"][0]
    key = finding_key(finding)
    refuted = {key: {"status": "refuted", "reason": "toy"}}
    assert gate([{**finding, "triage": {"status": "refuted"}}], refuted) == []
    assert gate([{**finding, "triage": {"status": "confirmed"}}], refuted)[0]["gate"].startswith(
        "a replay now confirms"
    )
    assert gate([{**finding, "triage": {"status": "refuted"}}], {})[0]["gate"] == "not in the triage file"
    shipped = load_triage()
    assert shipped and all(
        v["status"] in ("confirmed", "refuted", "not replayable") and v["reason"] for v in shipped.values()
    )
