"""The kv_indptr survey as a query over the lint: offline on synthetic sources, on real releases (network)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from upstream_fixtures import ATTN_DIR, MODES, MODES_FILE, SPEC_DIR, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.lint import analyse
from workbench.upstream.static.survey import format_table, survey, survey_release

SPEC_SRC = textwrap.dedent("""
    from dataclasses import dataclass
    class SpecInput: ...
    class KvMixin:
        kv_indptr: "Tensor" = None
    @dataclass
    class EagleDraftInput(SpecInput):
        kv_indptr: "Tensor" = None
    @dataclass
    class EagleDraftExtendInput(SpecInput):
        hidden_states: "Tensor" = None
    class MixedInput(SpecInput, KvMixin):
        pass
    class ChildInput(EagleDraftInput):
        pass
    class InitInput(SpecInput):
        def __init__(self):
            self.kv_indptr = None
    class NotSpec:
        kv_indptr = None
""")

BACKEND_SRC = textwrap.dedent("""
    class Backend:
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            if spec_info is None or spec_info.kv_indptr is None:
                x = self.kv_indptr
            else:
                kv_indptr = spec_info.kv_indptr
            if getattr(spec_info, "kv_indptr", None) is None:
                pass
            if hasattr(spec_info, "kv_indptr"):
                pass
            y = getattr(spec_info, "kv_indptr")
            forward_batch.spec_info.kv_indptr = x
""")

WORKER_SRC = textwrap.dedent("""
    class Worker:
        def forward_draft_extend_after_decode(self, batch):
            if batch.idle:
                extend = EagleDraftExtendInput.create_idle_input(device="cpu")
                batch.spec_info = extend
            return EagleDraftInput(bonus_tokens=None)
        def verify(self, batch):
            batch.spec_info = EagleDraftInput()
            batch.forward_mode = ForwardMode.TARGET_VERIFY
""")


def _survey_of(files: dict[str, str]) -> dict:
    tree = memory_tree({MODES_FILE: MODES, **files})
    return survey_release(analyse(tree), tree)


def test_spec_classes_with_and_without_field() -> None:
    classes = _survey_of({f"{SPEC_DIR}eagle_info.py": SPEC_SRC})["spec_inputs"]
    assert "NotSpec" not in classes and "KvMixin" not in classes and "SpecInput" not in classes
    assert classes["EagleDraftInput"]["has_field"] is True
    assert classes["EagleDraftInput"]["declaration"]["how"] == "field with default"
    assert classes["EagleDraftExtendInput"]["has_field"] is False
    assert classes["MixedInput"]["field_from"] == "KvMixin"
    assert classes["ChildInput"]["field_from"] == "EagleDraftInput"
    assert classes["InitInput"]["declaration"]["how"] == "self.kv_indptr in __init__"


def test_inheritance_across_files() -> None:
    other = "from eagle_info import EagleDraftInput\nclass FrozenDraftInput(EagleDraftInput):\n    pass\n"
    classes = _survey_of({f"{SPEC_DIR}eagle_info.py": SPEC_SRC, f"{SPEC_DIR}frozen.py": other})["spec_inputs"]
    assert classes["FrozenDraftInput"]["has_field"] and classes["FrozenDraftInput"]["file"] == f"{SPEC_DIR}frozen.py"


def test_read_kinds_plain_none_check_getattr_hasattr() -> None:
    backend = _survey_of({f"{ATTN_DIR}triton_backend.py": BACKEND_SRC})["backends"]["triton_backend.py"]
    lines = BACKEND_SRC.splitlines()

    def line_of(text: str) -> int:
        return next(i + 1 for i, ln in enumerate(lines) if text in ln)

    kinds = {a["line"]: a["kind"] for a in backend["accesses"]}
    assert kinds == {
        line_of("spec_info.kv_indptr is None"): "none_check",
        line_of("kv_indptr = spec_info"): "plain",
        line_of('getattr(spec_info, "kv_indptr", None)'): "getattr",
        line_of("hasattr("): "hasattr",
        line_of("y = getattr"): "plain",  # getattr without a default raises too
    }  # the write and self.kv_indptr (the backend's own buffer) are not reads of spec_info
    assert backend["kinds"] == ["getattr", "hasattr", "none_check", "plain"]
    assert backend["unsafe_reads"] == 3
    assert {a["function"] for a in backend["accesses"]} == {"Backend.init_forward_metadata"}


def _release(fixed: bool, guard: str) -> dict[str, str]:
    field = "    kv_indptr: 'Tensor' = None\n" if fixed else ""
    return {
        MODES_FILE: MODES,
        f"{SPEC_DIR}eagle_info.py": "class SpecInput: ...\nclass EagleDraftInput(SpecInput):\n"
        "    kv_indptr = None\nclass EagleDraftExtendInput(SpecInput):\n    x = 1\n" + field,
        f"{SPEC_DIR}eagle_worker_v2.py": WORKER_SRC,
        f"{ATTN_DIR}triton_backend.py": "class B:\n    def init_forward_metadata(self, fb):\n"
        f"        spec_info = fb.spec_info\n        if {guard}:\n            pass\n",
        f"{ATTN_DIR}flashattention_backend.py": "class F:\n    def init_forward_metadata(self, fb):\n"
        "        return fb.spec_info.page_table\n",
    }


def test_facts_regressed_vs_fixed() -> None:
    bad = _survey_of(_release(False, "spec_info.kv_indptr is None"))["facts"]
    good = _survey_of(_release(True, 'getattr(spec_info, "kv_indptr", None) is None'))["facts"]
    assert bad["EagleDraftExtendInput has kv_indptr"]["text"] == "no"
    assert bad["regressed class shipped (no kv_indptr)"]["text"] == "yes"
    assert bad["triton reads spec_info.kv_indptr"]["text"] == "guard"
    assert good["triton reads spec_info.kv_indptr"]["text"] == "getattr"
    assert good["EagleDraftExtendInput has kv_indptr"]["text"] == "yes"
    assert bad["fa3 reads spec_info.kv_indptr"]["text"] == "no"
    assert bad["wave reads spec_info.kv_indptr"]["text"] == "absent"
    assert bad["eagle_worker.py (V1) draft-extend uses EagleDraftExtendInput"]["text"] == "absent"
    v2 = "eagle_worker_v2.py (V2) draft-extend uses EagleDraftExtendInput"
    assert (good[v2]["text"], bad[v2]["severity"]) == ("yes", 2)


def test_survey_offline_table_and_plot(tmp_path: Path) -> None:
    cache = write_fake_cache(
        tmp_path, {"0.5.13": _release(False, "spec_info.kv_indptr is None"), "0.5.14": _release(True, "x")}
    )
    result = survey(UpstreamContext(cache_dir=cache, log=quiet), ["0.5.13", "0.5.14"])
    json.dumps(result)
    table = format_table(result).splitlines()
    assert table[0].split() == ["fact", "0.5.13", "0.5.14"]
    assert any(line.split()[-2:] == ["no", "yes"] and "has kv_indptr" in line for line in table)
    assert result["releases"]["0.5.13"]["facts"]["EagleDraftExtendInput has kv_indptr"]["text"] == "no"
    assert result["releases"]["0.5.14"]["facts"]["EagleDraftExtendInput has kv_indptr"]["text"] == "yes"
    out = tmp_path / "out"
    assert (
        workbench_main(
            ["upstream", "--cache-dir", str(cache), "survey", "--sglang", "0.5.13", "0.5.14", "--out", str(out)]
        )
        == 0
    )
    for suffix in ("json", "png", "svg"):
        assert (out / f"upstream_survey.{suffix}").stat().st_size > 0


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1",
    reason="network test: downloads sglang wheels from PyPI; skipped unless WB_NETWORK_TESTS=1",
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1200)
def test_real_survey_matches_upstream_facts() -> None:
    result = survey(UpstreamContext(log=quiet), ["0.5.11", "0.5.12", "0.5.13", "0.5.14"])
    facts = {v: {k: c["text"] for k, c in r["facts"].items()} for v, r in result["releases"].items()}
    assert [facts[v]["EagleDraftExtendInput has kv_indptr"] for v in result["versions"]] == ["–", "no", "no", "yes"]
    for version in result["versions"]:
        for backend in ("triton", "flashinfer", "flashinfer_mla", "aiter", "wave"):
            assert facts[version][f"{backend} reads spec_info.kv_indptr"] not in ("no", "absent")
        assert facts[version]["fa3 reads spec_info.kv_indptr"] == "no"
    assert facts["0.5.13"]["triton reads spec_info.kv_indptr"] == "guard+plain"
    assert facts["0.5.14"]["flashinfer reads spec_info.kv_indptr"] == "getattr+plain"
    assert facts["0.5.14"]["eagle_worker_v2.py (V2) draft-extend uses EagleDraftExtendInput"] == "yes"
    assert facts["0.5.12"]["eagle_worker.py (V1) draft-extend uses EagleDraftExtendInput"] == "yes"
