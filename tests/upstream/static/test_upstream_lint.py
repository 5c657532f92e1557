"""The contract lint: offline on synthetic sources; on real 0.5.14 checkouts (network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_fixtures import ATTN_DIR, MODES, SPEC_DIR
from upstream_fixtures import toy_tree as sources

from workbench.cli import main as workbench_main
from workbench.upstream.static.lint import analyse, finding_key, query
from workbench.upstream.static.modes import parse_forward_modes


def test_forward_mode_predicates_are_evaluated_from_source() -> None:
    fm = parse_forward_modes(MODES)
    assert fm.members == ["EXTEND", "DECODE", "IDLE", "TARGET_VERIFY", "DRAFT_EXTEND_V2"]
    assert fm.accepts("is_decode_or_idle") == {"DECODE", "IDLE"}
    assert fm.accepts("is_extend") == {"EXTEND"}
    assert fm.accepts("is_extend", {"include_v2": True}) == {"EXTEND", "DRAFT_EXTEND_V2"}
    assert fm.accepts("is_missing") is None


def test_lint_finds_the_regression_and_nothing_else() -> None:
    result = analyse(sources(with_field=False))
    keys = sorted((f["mode"], f["spec_class"], f["attr"], f["read_file"], f["read_line"]) for f in result["findings"])
    # The plain `spec_info.kv_indptr is None` read at line 18 in the decode/idle branch, for the idle
    # DraftExtendInput the worker installs through prepare_for_draft_extend (IDLE).
    assert keys == [("IDLE", "DraftExtendInput", "kv_indptr", f"{ATTN_DIR}toy_backend.py", 18)]
    finding = result["findings"][0]
    assert (finding["install_file"], finding["install_line"], finding["install_kind"]) == (
        f"{SPEC_DIR}worker.py",
        7,
        "helper",
    )
    assert finding["backend"] == "toy" and finding["backend_class"] == "Backend"
    assert finding_key(finding) == finding["key"] == "toy|IDLE|DraftExtendInput|kv_indptr|Backend.init_forward_metadata"
    assert query({"findings": result["findings"]}, attr="kv_indptr", mode="IDLE") == [finding]


def test_lint_is_clean_once_the_class_declares_the_field() -> None:
    assert analyse(sources(with_field=True))["findings"] == []


def test_reads_carry_modes_and_guards() -> None:
    reads = analyse(sources(with_field=False))["backends"][f"{ATTN_DIR}toy_backend.py:Backend"]["reads"]
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
    result = analyse(sources(with_field=False))
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
    from upstream_checkouts import make_checkout

    between = make_checkout(version, tmp_path / "between", ("EagleDraftExtendInput", "kv_indptr"))
    clean = make_checkout(version, tmp_path / "clean")
    out = tmp_path / "between.json"
    assert workbench_main(["upstream", "lint", "--sglang-src", str(between), "--replay", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    hits = {f["backend"]: f for f in query(result, attr="kv_indptr", spec_class="EagleDraftExtendInput", mode="IDLE")}
    triton = hits["triton"]
    assert (triton["read_file"], triton["read_line"]) == ("sglang/srt/layers/attention/triton_backend.py", 593)
    assert (triton["install_file"], triton["install_line"]) == ("sglang/srt/speculative/base_spec_worker.py", 114)
    assert triton["verdict"] == "confirmed", triton["verdict_reason"]
    assert "has no attribute 'kv_indptr'" in triton["verdict_reason"]
    # From 0.5.14 on, flashinfer reads the field through getattr(..., None): guarded, no finding.
    assert "flashinfer" not in hits and {"flashinfer_mla", "wave"} <= set(hits)
    clean_result = workbench_main(
        ["upstream", "lint", "--sglang-src", str(clean), "--json", str(tmp_path / "clean.json")]
    )
    assert clean_result == 0
    clean_findings = json.loads((tmp_path / "clean.json").read_text())
    assert query(clean_findings, attr="kv_indptr", spec_class="EagleDraftExtendInput") == []


def test_a_spec_input_type_test_constrains_classes() -> None:
    import textwrap

    from upstream_fixtures import MODES_FILE

    spec = textwrap.dedent("""
        class SpecInput:
            def __init__(self, spec_input_type):
                self.spec_input_type = spec_input_type
        class VerifyInput(SpecInput):
            def __init__(self):
                super().__init__(SpecInputType.VERIFY)
        class OtherInput(SpecInput):
            def __post_init__(self):
                assert self.spec_input_type in (SpecInputType.OTHER, SpecInputType.OTHER_VERIFY)
                super().__init__(self.spec_input_type)
        class Worker:
            def verify(self, batch):
                batch.spec_info = VerifyInput() if batch.x else OtherInput()
                batch.forward_mode = ForwardMode.TARGET_VERIFY
    """)
    backend = textwrap.dedent("""
        class B:
            def init_forward_metadata(self, fb):
                spec_info = fb.spec_info
                if spec_info.spec_input_type == SpecInputType.VERIFY:
                    a = spec_info.verify_only
                else:
                    b = spec_info.other_only
    """)
    from workbench.upstream.sources.trees import memory_tree

    tree = memory_tree({MODES_FILE: MODES, f"{SPEC_DIR}info.py": spec, f"{ATTN_DIR}b_backend.py": backend})
    got = {(f["spec_class"], f["attr"]) for f in analyse(tree)["findings"]}
    assert got == {("VerifyInput", "verify_only"), ("OtherInput", "other_only")}


def test_an_input_installed_as_self_is_installed_for_each_class_that_runs_the_method() -> None:
    import textwrap

    from upstream_fixtures import MODES_FILE

    from workbench.upstream.sources.trees import memory_tree

    spec = textwrap.dedent("""
        class SpecInput:
            def __init__(self, spec_input_type):
                self.spec_input_type = spec_input_type
        class VerifyInput(SpecInput):
            def __init__(self):
                super().__init__(SpecInputType.VERIFY)
            def prepare_for_verify(self, batch):
                batch.spec_info = self
                batch.forward_mode = ForwardMode.TARGET_VERIFY
            @staticmethod
            def not_an_instance(batch, self):
                batch.spec_info = self
        class InheritsVerify(VerifyInput):
            pass
        class OverridesVerify(VerifyInput):
            def prepare_for_verify(self, batch):
                batch.forward_mode = ForwardMode.TARGET_VERIFY
        class Worker:
            def verify(self, batch):
                batch.spec_info = self
                batch.forward_mode = ForwardMode.TARGET_VERIFY
    """)
    backend = textwrap.dedent("""
        class B:
            def init_forward_metadata(self, fb):
                if fb.forward_mode.is_target_verify():
                    n = fb.spec_info.draft_token_num
    """)
    tree = memory_tree({MODES_FILE: MODES, f"{SPEC_DIR}info.py": spec, f"{ATTN_DIR}b_backend.py": backend})
    result = analyse(tree)
    installs = {(i["class"], i["install_line"], i["install_function"], tuple(i["modes"])) for i in result["installs"]}
    line = spec.splitlines().index("        batch.spec_info = self") + 1
    # the method's own class and the subclass that inherits it; not the one that overrides it, not a
    # static method's parameter named self, not `self` in a class that is no spec input
    assert installs == {
        ("VerifyInput", line, "VerifyInput.prepare_for_verify", ("TARGET_VERIFY",)),
        ("InheritsVerify", line, "VerifyInput.prepare_for_verify", ("TARGET_VERIFY",)),
    }
    assert result["unresolved_installs"] == []
    got = {(f["spec_class"], f["attr"], f["install_kind"]) for f in result["findings"]}
    assert got == {("VerifyInput", "draft_token_num", "assign"), ("InheritsVerify", "draft_token_num", "assign")}


def test_an_install_gets_the_mode_set_three_calls_deep_before_a_later_one() -> None:
    """A v2 worker's `batch.spec_info = verify_input` runs in TARGET_VERIFY, set in a helper three calls
    down (verify -> run_verify -> prepare_for_verify, as 0.5.23's frozen-KV MTP worker); the draft-extend
    call after it (which installs another input first) does not give the install its mode."""
    import textwrap

    from upstream_fixtures import MODES_FILE

    from workbench.upstream.sources.trees import memory_tree

    spec = textwrap.dedent("""
        class SpecInput:
            def __init__(self, spec_input_type):
                self.spec_input_type = spec_input_type
        class VerifyInput(SpecInput):
            def __init__(self):
                super().__init__(SpecInputType.VERIFY)
        class Worker:
            def forward_batch_generation(self, batch):
                verify_input = VerifyInput()
                batch.spec_info = verify_input
                self.verify(batch)
                self.draft_extend(batch)
            def verify(self, batch):
                return run_verify(batch)
            def draft_extend(self, batch):
                batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        def run_verify(batch):
            return prepare_for_verify(batch)
        def prepare_for_verify(batch):
            batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.TARGET_VERIFY
    """)
    backend = textwrap.dedent("""
        class B:
            def init_forward_metadata(self, fb):
                if fb.forward_mode.is_target_verify():
                    n = fb.spec_info.draft_token_num
    """)
    tree = memory_tree({MODES_FILE: MODES, f"{SPEC_DIR}info.py": spec, f"{ATTN_DIR}b_backend.py": backend})
    result = analyse(tree)
    line = spec.splitlines().index("        batch.spec_info = verify_input") + 1
    assert [(i["class"], i["install_line"], i["modes"]) for i in result["installs"]] == [
        ("VerifyInput", line, ["IDLE", "TARGET_VERIFY"])
    ]
    assert {(f["spec_class"], f["attr"], f["mode"]) for f in result["findings"]} == {
        ("VerifyInput", "draft_token_num", "TARGET_VERIFY")
    }


_TWO_PATHS = {
    "info.py": """
        class SpecInput:
            def __init__(self, spec_input_type):
                self.spec_input_type = spec_input_type
        class VerifyInput(SpecInput):
            def __init__(self):
                super().__init__(SpecInputType.VERIFY)
        def build_verify_input():
            return VerifyInput()
        class AlphaWorker:
            def draft(self):
                return build_verify_input()
        class BetaWorker:
            def draft(self):
                return build_verify_input()
        class GammaWorker:
            def draft(self):
                return build_verify_input()
        class Runner:
            def forward(self, batch, worker):
                verify_input = worker.draft()
                batch.spec_info = verify_input
                batch.forward_mode = ForwardMode.TARGET_VERIFY
    """,
    "b_backend.py": """
        class B:
            def init_forward_metadata(self, fb):
                if fb.forward_mode.is_target_verify():
                    n = fb.spec_info.draft_token_num
    """,
}
_ANALYSE = """
import json, sys, textwrap
from upstream_fixtures import ATTN_DIR, MODES, MODES_FILE, SPEC_DIR
from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.lint import analyse
given = json.loads(sys.argv[1])
files = {MODES_FILE: MODES, SPEC_DIR + "info.py": textwrap.dedent(given["info.py"])}
files[ATTN_DIR + "b_backend.py"] = textwrap.dedent(given["b_backend.py"])
result = analyse(memory_tree(files))
print(json.dumps({"installs": result["installs"], "findings": result["findings"]}, sort_keys=True))
"""


def test_an_install_reached_by_equal_paths_reads_the_same_under_every_hash_seed() -> None:
    """One construction reaches one install along three paths of one length (through each worker's
    `draft`): the install's `via` is the first of them by its steps, whatever order the set of origins
    iterates in. Before the order was defined, seeds 1 and 2 gave GammaWorker and BetaWorker."""
    tests = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), tests])}
    outs = []
    for seed in ("1", "2", "3"):
        proc = subprocess.run(
            [sys.executable, "-c", _ANALYSE, json.dumps(_TWO_PATHS)],
            env={**env, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout))
    (install,) = outs[0]["installs"]
    assert install["via"] == ["local verify_input", "returned by AlphaWorker.draft", "returned by build_verify_input"]
    assert [f["spec_class"] for f in outs[0]["findings"]] == ["VerifyInput"]
    assert outs[1] == outs[0] and outs[2] == outs[0]
