"""Verdicts from replays, offline: the driver's pieces that need no sglang (the recording proxy, the
GPU-library stubs, the CUDA redirect, the line watch), the case plan, and the verdict of every kind
from driver records of the shape the real driver writes. The real replays are network tests."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workbench.run.serialise import to_dict
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.in_release import stubs
from workbench.upstream.in_release.devices import CudaToCpu
from workbench.upstream.replay.cases import batch_kind, case_key, plan
from workbench.upstream.replay.verdicts import decide, judge
from workbench.upstream.replay.wb_driver.case import LineWatch
from workbench.upstream.replay.wb_driver.proxy import SpecProxy, reads_of
from workbench.upstream.static.finding import read_finding

TRITON = "sglang/srt/layers/attention/triton_backend.py"
FLASHINFER = "sglang/srt/layers/attention/flashinfer_backend.py"


@dataclasses.dataclass
class DraftExtend:
    hidden_states: object = None
    kv_indptr: object = None


class Verify:
    def __init__(self) -> None:
        self.draft_token_num = 4


def test_the_proxy_answers_from_the_real_instance_and_records_reads() -> None:
    real = DraftExtend(hidden_states=1)
    proxy = SpecProxy(real)
    assert isinstance(proxy, DraftExtend) and not isinstance(proxy, Verify)
    assert proxy.hidden_states == 1 and proxy.kv_indptr is None
    assert getattr(proxy, "kv_indices", "default") == "default"  # a guarded read sees the real class's answer
    with pytest.raises(AttributeError, match="'DraftExtend' object has no attribute 'kv_indices'"):
        proxy.kv_indices  # noqa: B018 - the read itself is the test
    proxy.kv_indptr = 7
    assert real.kv_indptr == 7
    assert [(r["attr"], r["missing"]) for r in reads_of(proxy)] == [
        ("hidden_states", False),
        ("kv_indptr", False),
        ("kv_indices", True),
        ("kv_indices", True),
    ]


def test_a_stubbed_library_builds_stand_ins_then_stops_at_first_use() -> None:
    stubs.install({"wb_fake_gpu_lib"})
    import wb_fake_gpu_lib  # noqa: F401 - served by the stub finder
    from wb_fake_gpu_lib.decode import Wrapper

    class Planner(Wrapper):  # a class deriving from a library class
        pass

    wrapper = Wrapper(workspace=1)
    Planner()
    assert "wb_fake_gpu_lib.decode.Wrapper" in stubs.STATE.built and "Planner" in stubs.STATE.built
    with stubs.armed():
        with pytest.raises(stubs.GpuLibraryReached, match=r"wb_fake_gpu_lib.decode.Wrapper\(\).plan"):
            wrapper.plan(1, 2)
        with pytest.raises(stubs.GpuLibraryReached, match="is_cuda_graph_enabled"):
            wrapper.is_cuda_graph_enabled  # noqa: B018 - reading a library object's state is using it
        with pytest.raises(stubs.GpuLibraryReached):
            Wrapper()
    assert not stubs.STATE.armed


def test_cuda_devices_are_redirected_to_the_cpu() -> None:
    with CudaToCpu() as redirect:
        t = torch.full((0, 4), -1, dtype=torch.long, device="cuda")
        u = torch.empty(3, device=torch.device("cuda", 0))
    assert t.device.type == "cpu" and u.device.type == "cpu"
    assert redirect.redirected == {"full", "empty"}


def test_the_line_watch_sees_which_read_lines_ran(tmp_path: Path) -> None:
    pkg = tmp_path / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (pkg / "be.py").write_text(
        textwrap.dedent("""
        def init(spec, idle):
            if idle:
                return spec.kv_indptr
            return spec.kv_indices
        """)
    )
    spec = importlib.util.spec_from_file_location("wb_watch_be", pkg / "be.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with LineWatch(["sglang/srt/be.py:4", "sglang/srt/be.py:5"]) as watch:
        mod.init(DraftExtend(), True)
    assert watch.ran == {"sglang/srt/be.py:4"}
    assert sys.gettrace() is None


def finding(backend: str, mode: str, cls: str, attr: str, line: int, file: str = TRITON) -> dict:
    names = {"triton": "TritonAttnBackend", "flashinfer": "FlashInferAttnBackend", "wave": "WaveAttnBackend"}
    return {
        "backend": backend,
        "backend_class": names.get(backend, "X"),
        "backend_file": file,
        "mode": mode,
        "spec_class": cls,
        "spec_class_file": "sglang/srt/speculative/eagle_info.py",
        "attr": attr,
        "read_file": file,
        "read_line": line,
        "read_function": "TritonAttnBackend.init_forward_metadata",
        "verdict": None,
    }


def test_the_plan_groups_findings_into_cases() -> None:
    fs = [
        finding("triton", "IDLE", "EagleVerifyInput", "kv_indptr", 593),
        finding("triton", "IDLE", "EagleVerifyInput", "kv_indices", 631),
        finding("flashinfer", "IDLE", "EagleVerifyInput", "kv_indices", 1340, FLASHINFER),
        finding("triton", "TARGET_VERIFY", "EagleVerifyInput", "kv_indptr", 700),
    ]
    cases = {c["key"]: c for c in plan(fs)}
    padded = cases[case_key(fs[0])]
    assert padded["batch"] == "IDLE padded" and padded["watch"] == [f"{TRITON}:593", f"{TRITON}:631"]
    assert cases[case_key(fs[0], "IDLE unpadded")]["batch"] == "IDLE unpadded"
    assert not padded["trace"] and cases[case_key(fs[2])]["trace"] and "flashinfer" in cases[case_key(fs[2])]["stub"]
    assert padded["stub"] == []
    assert cases[case_key(fs[3])]["batch"] == "TARGET_VERIFY"
    assert len(cases) == 5 and [c["trace"] for c in plan(fs)][-2:] == [True, True]  # real cases run first
    assert (batch_kind("DECODE"), batch_kind("DRAFT_EXTEND_V2"), batch_kind("EXTEND")) == (
        "DECODE",
        "DRAFT_EXTEND_V2",
        "EXTEND",
    )


def _case(f: dict, runs: list[dict], trace: bool = False, kind: str = "IDLE padded") -> dict:
    return {
        "case": {"key": case_key(f, kind), "backend_class": f["backend_class"], "batch": kind, "trace": trace},
        "built_by": f"{f['spec_class']}.create_idle_input",
        "batch": {"kind": kind, "batch_size": 2},
        "stand_ins": ["flashinfer stubbed"] if trace else [],
        "runs": runs,
    }


def _missing(cls: str, attr: str, at: str, answered: list[str] | None = None) -> dict:
    msg = f"'{cls}' object has no attribute '{attr}'"
    return {
        "status": "crashed",
        "exception": "AttributeError",
        "message": msg,
        "missing_attr": attr,
        "raised_at": at,
        "ran": [at],
        "answered": answered or [],
    }


def test_every_verdict_from_driver_records() -> None:
    f593 = finding("triton", "IDLE", "EagleVerifyInput", "kv_indptr", 593)
    f631 = finding("triton", "IDLE", "EagleVerifyInput", "kv_indices", 631)
    crash = _missing("EagleVerifyInput", "kv_indptr", f"{TRITON}:593")
    after = {"status": "ok", "ran": [f"{TRITON}:593"], "answered": ["kv_indptr=None"]}
    case = _case(f593, [crash, after])
    verdict, reason, run = judge(f593, case)
    assert verdict == "confirmed" and "has no attribute 'kv_indptr' at triton_backend.py:593" in reason
    verdict, reason, _ = judge(f631, case)  # behind the first crash: decided once it is answered
    assert verdict == "refuted" and "never ran once the earlier crash is answered (kv_indptr=None" in reason
    ran = {"status": "ok", "ran": [f"{TRITON}:631"], "answered": []}
    assert judge(f631, _case(f631, [ran]))[0] == "refuted"
    behind = _missing("EagleVerifyInput", "kv_indices", f"{TRITON}:631", ["kv_indptr=None"])
    verdict, reason, _ = judge(f631, _case(f631, [crash, behind]))
    assert verdict == "confirmed" and reason.endswith(
        "once the earlier crash is answered (kv_indptr=None: its smallest fix)"
    )
    other = {"status": "crashed", "exception": "ZeroDivisionError", "message": "x", "raised_at": f"{TRITON}:40"}
    verdict, reason, _ = judge(f593, _case(f593, [{**other, "ran": [], "answered": []}]))
    assert verdict == "unverified" and "ZeroDivisionError" in reason and "before deciding the read" in reason

    fl = finding("flashinfer", "IDLE", "DFlashDraftInputV2", "kv_indices", 1340, FLASHINFER)
    lib = {
        "status": "ok",
        "stopped_at": "library call",
        "library_call": "flashinfer.W().plan",
        "raised_at": f"{FLASHINFER}:1322",
    }
    verdict, reason, _ = judge(fl, _case(fl, [{**lib, "ran": [], "answered": []}], trace=True))
    assert verdict == "traced: not read" and "flashinfer.W().plan at flashinfer_backend.py:1322" in reason
    raised = _missing("DFlashDraftInputV2", "kv_indices", f"{FLASHINFER}:1340")
    assert judge(fl, _case(fl, [raised], trace=True))[0] == "traced: raised"


def test_a_replay_confirmation_beats_a_static_unreachable_and_names_what_stopped_a_replay() -> None:
    f = finding("triton", "IDLE", "EagleVerifyInput", "kv_indptr", 593)
    crash = _missing("EagleVerifyInput", "kv_indptr", f"{TRITON}:593")
    unpadded = {
        "case": {"key": case_key(f, "IDLE unpadded")},
        "runs": [{"status": "ok", "stopped_at": "no metadata call", "message": "no call"}],
    }
    by_key = {case_key(f): _case(f, [crash]), case_key(f, "IDLE unpadded"): unpadded}
    out = decide(f, by_key, {"status": "ok"})
    assert (out["verdict"], out["verdict_by"]) == ("confirmed", "replay")
    assert out["replay"]["raised_at"] == f"{TRITON}:593" and out["replay"]["unpadded"] == "no call"
    static = {**f, "verdict": "unreachable", "verdict_reason": "no runner path", "verdict_by": "runner paths"}
    won = decide(static, by_key, {"status": "ok"})  # the strongest evidence is the verdict
    assert (won["verdict"], won["verdict_by"], won["static_verdict"]) == ("confirmed", "replay", "unreachable")
    assert won["static_reason"] == "no runner path" and "overrides them" in won["verdict_reason"]
    refuted = {case_key(f): _case(f, [{"status": "ok", "ran": [], "answered": []}])}
    kept = decide(static, refuted, {"status": "ok"})  # a replay that did not raise leaves the static verdict
    assert (kept["verdict"], kept["replay_verdict"]) == ("unreachable", "refuted") and "static_verdict" not in kept
    gone = decide(f, {}, {"status": "error", "message": "the environment could not be built"})
    assert gone["verdict"] == "unverified" and "the environment could not be built" in gone["verdict_reason"]
    broken = {case_key(f): {"case": {"key": case_key(f)}, "stage": "backend", "error": "TypeError: x", "frames": []}}
    out = decide(f, broken, {"status": "ok"})
    assert out["verdict"] == "unverified" and "could not build the backend (TypeError: x)" in out["verdict_reason"]
    json.dumps(out)


@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.14"])
def test_real_verdicts(version: str) -> None:
    """Every finding gets a verdict; the DFlash idle input crashes the real triton backend."""
    from workbench.upstream.guard import check

    result = check(UpstreamContext(log=quiet), [version], replay=True)
    verdicts = {f.key: f for f in result["findings"]}
    assert all(f.verdict and f.verdict_reason for f in verdicts.values())
    seed = verdicts["triton|IDLE|DFlashDraftInputV2|kv_indptr|TritonAttnBackend.init_forward_metadata"]
    assert seed.verdict == "confirmed" and seed.replay.raised_at.endswith("triton_backend.py:593")
    unverified = [f for f in verdicts.values() if f.verdict == "unverified"]
    assert len(unverified) <= 0.1 * len(verdicts), [f.verdict_reason for f in unverified]
    assert result["results"][0]["replay"]["status"] == "ok"


@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.14"])
def test_real_reproducer_raises_and_its_fix_stops_it(version: str, tmp_path) -> None:
    """The reproducer of the newest confirmed idle finding raises on the release, not with the fix."""
    from workbench.upstream.replay.reproducers import reproducers

    index = reproducers(UpstreamContext(log=quiet), version, tmp_path, [version])
    done = index["reproducers"]["triton|IDLE|DFlashDraftInputV2|kv_indptr|TritonAttnBackend.init_forward_metadata"]
    assert done["reproduced"] and done["fixed"] and done["raises"] == [version]
    script = (tmp_path / done["folder"] / "repro.py").read_text()
    assert "import workbench" not in script and "from workbench" not in script


def test_a_read_in_the_other_branch_of_the_if_that_raised_is_not_made() -> None:
    from workbench.upstream.replay.opposite_branches import other_branch

    src = textwrap.dedent("""
        def update(spec, loop):
            if spec.kind == "dflash":
                a = spec.generate_attn_arg_prefill(1)
            else:
                a = spec.generate_attn_arg_prefill(2)
            for x in loop:
                if x:
                    b = spec.kv_indices
                else:
                    b = spec.kv_indptr
            return a, b
        """)
    assert other_branch(src, 4, 6) == 3 and other_branch(src, 6, 4) == 3
    assert other_branch(src, 9, 11) is None  # inside a loop, the next pass may take the other branch
    assert other_branch(src, 4, 12) is None and other_branch("def (:", 1, 2) is None
    f = finding("flashinfer", "TARGET_VERIFY", "UnoForwardInput", "generate_attn_arg_prefill", 4, FLASHINFER)
    run = _missing("UnoForwardInput", "generate_attn_arg_prefill", f"{FLASHINFER}:6")
    verdict, reason, _ = judge(f, _case(f, [run], trace=True, kind="TARGET_VERIFY"), lambda path: src)
    assert verdict == "traced: not read" and "took the other branch of the `if` at line 3" in reason


def test_the_smallest_fix_is_a_class_level_default_after_the_fields_or_the_docstring() -> None:
    from workbench.upstream.replay.reproducers import slug, smallest_fix
    from workbench.upstream.sources.trees import memory_tree

    path = "sglang/srt/speculative/x_info.py"
    src = textwrap.dedent('''
        from dataclasses import dataclass
        from typing import Optional

        import torch


        @dataclass
        class VerifyIn:
            draft_token: torch.Tensor
            topk: int = 1

            def method(self):
                return self.topk


        class Relay:
            """A relay."""

            def __init__(self):
                self.rids = []
        ''')
    tree = memory_tree({path: src}, release="0.5.23")
    for cls, after in (("VerifyIn", "topk: int = 1"), ("Relay", '"""A relay."""')):
        f = {"spec_class_file": path, "spec_class": cls, "attr": "kv_indptr"}
        fix = smallest_fix(tree, f)
        ns: dict = {}
        exec(compile(fix["text"], path, "exec"), ns)  # the fixed synthetic source
        assert ns[cls].kv_indptr is None
        lines = fix["text"].splitlines()
        assert lines[fix["line"] - 2].strip() == after and lines[fix["line"]].strip().startswith("kv_indptr: Optional")
        changed = [ln for ln in fix["diff"].splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
        assert [ln[0] for ln in changed] == ["+", "+"]
    assert slug({"backend": "triton", "mode": "IDLE", "spec_class": "EagleVerifyInput", "attr": "kv_indptr"}) == (
        "triton-idle-eagleverifyinput-kv-indptr"
    )


def test_a_verdicts_replay_says_how_its_run_ended_and_the_shipped_file_keeps_it() -> None:
    """The deciding run's ``status`` and ``stopped_at`` go into the finding's ``replay`` and survive the
    compaction ``scripts/ship_upstream.py`` writes the shipped findings with."""
    script = Path(__file__).resolve().parents[3] / "scripts" / "ship_upstream.py"
    spec = importlib.util.spec_from_file_location("wb_ship_upstream", script)
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    fl = finding("flashinfer", "IDLE", "DFlashDraftInputV2", "kv_indices", 1340, FLASHINFER)
    lib = {"status": "ok", "stopped_at": "library call", "library_call": "flashinfer.W().plan", "ran": []}
    out = decide(fl, {case_key(fl): _case(fl, [{**lib, "answered": []}], trace=True)}, {"status": "ok"})
    assert (out["replay"]["status"], out["replay"]["stopped_at"]) == ("ok", "library call")
    lint = {"source": "sglang 0.5.23", "release": "0.5.23", "spec_class_line": 1, "read_code": "x", "key": "k"}
    install = {"install_file": FLASHINFER, "install_line": 1, "install_function": "W.run", "install_kind": "keyword"}
    slim = to_dict(ship._slim(read_finding({**lint, **install, "installs": [], **out}), []))["replay"]
    assert (slim["status"], slim["stopped_at"]) == ("ok", "library call") and "outcome" not in slim
