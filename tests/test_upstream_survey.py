"""Tests of workbench.upstream: offline ones on synthetic sources, network ones on real releases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from workbench.cli import main as workbench_main
from workbench.upstream import astscan
from workbench.upstream import release_replay as replay_mod
from workbench.upstream.contract_survey import analyse_sources, format_table, survey
from workbench.upstream.env import EnvBuildError, ReplayEnv, dependency_specs
from workbench.upstream.releases import ReleaseError, check_version, version_key
from workbench.upstream.standin import write_standin

KNOWN = ["0.5.11", "0.5.12", "0.5.13", "0.5.13.post1", "0.5.14"]

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
        def _draft_extend_for_decode(self, batch):
            draft_input = EagleDraftInput()
            draft_input.prepare_for_extend(batch)
        def _draft_extend_for_prefill(self, batch):
            batch.spec_info = EagleDraftExtendInput(hidden_states=None)
        def verify(self, batch):
            batch.spec_info = EagleDraftExtendInput()
""")


def _accesses(src: str) -> dict[int, str]:
    return {a["line"]: a["kind"] for a in astscan.field_accesses(src)}


def test_spec_classes_with_and_without_field() -> None:
    classes = astscan.spec_input_classes({"eagle_info.py": SPEC_SRC})
    assert "NotSpec" not in classes and "KvMixin" not in classes and "SpecInput" not in classes
    assert classes["EagleDraftInput"]["has_field"] is True
    assert classes["EagleDraftInput"]["declaration"]["annotation"] == "'Tensor'"
    assert classes["EagleDraftExtendInput"]["has_field"] is False
    assert classes["EagleDraftExtendInput"]["dataclass"] is True
    assert classes["MixedInput"]["field_from"] == "KvMixin"
    assert classes["ChildInput"]["field_from"] == "EagleDraftInput"
    assert classes["InitInput"]["declaration"]["kind"] == "self in __init__"


def test_inheritance_across_files() -> None:
    other = "from eagle_info import EagleDraftInput\nclass FrozenDraftInput(EagleDraftInput):\n    pass\n"
    classes = astscan.spec_input_classes({"eagle_info.py": SPEC_SRC, "frozen.py": other})
    assert classes["FrozenDraftInput"]["has_field"] and classes["FrozenDraftInput"]["file"] == "frozen.py"


def test_access_kinds_plain_guard_getattr() -> None:
    kinds = _accesses(BACKEND_SRC)
    lines = BACKEND_SRC.splitlines()
    keys = (
        "spec_info.kv_indptr is None",
        "kv_indptr = spec_info",
        'getattr(spec_info, "kv_indptr", None)',
        "hasattr(",
        "y = getattr",
        "forward_batch.spec_info.kv_indptr =",
    )
    line_of = {key: next(i + 1 for i, ln in enumerate(lines) if key in ln) for key in keys}
    assert kinds[line_of["spec_info.kv_indptr is None"]] == astscan.NONE_GUARD
    assert kinds[line_of["kv_indptr = spec_info"]] == astscan.PLAIN
    assert kinds[line_of['getattr(spec_info, "kv_indptr", None)']] == astscan.GETATTR
    assert kinds[line_of["hasattr("]] == astscan.HASATTR
    assert kinds[line_of["y = getattr"]] == astscan.PLAIN  # getattr without a default raises too
    assert kinds[line_of["forward_batch.spec_info.kv_indptr ="]] == astscan.WRITE
    assert len(kinds) == 6  # self.kv_indptr (the backend's own buffer) is not counted


def test_summary_counts_unsafe_reads() -> None:
    accesses = astscan.field_accesses(BACKEND_SRC)
    summary = astscan.summarize_accesses(accesses)
    assert summary["reads"] and summary["writes"] == 1
    assert summary["kinds"] == ["getattr", "hasattr", "none_guard", "plain"]
    assert summary["unsafe_reads"] == 3
    fn = {a["function"] for a in accesses}
    assert fn == {"Backend.init_forward_metadata"}
    assert astscan.summarize_accesses(astscan.field_accesses("x = y.kv_indptr\n"))["reads"] is False


def test_worker_installs() -> None:
    names = {"EagleDraftInput", "EagleDraftExtendInput"}
    recs = astscan.spec_info_installs(WORKER_SRC, names)
    uses = {(r["function"], r["class"], r["how"]): r["use"] for r in recs}
    after = "forward_draft_extend_after_decode"
    assert uses[(after, "EagleDraftExtendInput", "create_idle_input")] == "installed"
    assert uses[(after, "EagleDraftInput", "constructor")] == "returned"
    assert uses[("_draft_extend_for_decode", "EagleDraftInput", "constructor")] == "passed"
    assert uses[("_draft_extend_for_prefill", "EagleDraftExtendInput", "constructor")] == "installed"
    verify = [r for r in recs if r["function"] == "verify"][0]
    assert verify["use"] == "installed" and verify["draft_extend"] is False
    assert astscan.draft_extend_spec_info(recs) == ["EagleDraftExtendInput", "EagleDraftInput"]


def _release(fixed: bool, guard: str) -> tuple[dict, dict]:
    field = "    kv_indptr: 'Tensor' = None\n" if fixed else ""
    spec = {
        "eagle_info.py": "class SpecInput: ...\nclass EagleDraftInput(SpecInput):\n"
        "    kv_indptr = None\nclass EagleDraftExtendInput(SpecInput):\n    x = 1\n" + field,
        "eagle_worker_v2.py": WORKER_SRC,
    }
    attn = {
        "triton_backend.py": f"def f(spec_info):\n    if {guard}:\n        pass\n",
        "flashattention_backend.py": "def f(spec_info):\n    return spec_info.page_table\n",
    }
    return spec, attn


def test_facts_regressed_vs_fixed() -> None:
    bad = analyse_sources(*_release(False, "spec_info.kv_indptr is None"))["facts"]
    good = analyse_sources(*_release(True, 'getattr(spec_info, "kv_indptr", None) is None'))["facts"]
    assert bad["EagleDraftExtendInput has kv_indptr"]["text"] == "no"
    assert bad["regressed class shipped (no kv_indptr)"]["text"] == "yes"
    assert bad["triton reads spec_info.kv_indptr"]["text"] == "guard"
    assert good["triton reads spec_info.kv_indptr"]["text"] == "getattr"
    assert good["EagleDraftExtendInput has kv_indptr"]["text"] == "yes"
    assert bad["fa3 reads spec_info.kv_indptr"]["text"] == "no"
    assert bad["wave reads spec_info.kv_indptr"]["text"] == "absent"
    assert bad["eagle_worker.py (V1) draft-extend uses EagleDraftExtendInput"]["text"] == "absent"
    assert good["eagle_worker_v2.py (V2) draft-extend uses EagleDraftExtendInput"]["text"] == "yes"


def _fake_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "releases.json").write_text(json.dumps({"fetched_at": time.time(), "versions": KNOWN}))
    for version, fixed in (("0.5.13", False), ("0.5.14", True)):
        spec, attn = _release(fixed, "spec_info.kv_indptr is None")
        with zipfile.ZipFile(cache / "wheels" / f"sglang-{version}-py3-none-any.whl", "w") as zf:
            for name, text in spec.items():
                zf.writestr(f"sglang/srt/speculative/{name}", text)
            for name, text in attn.items():
                zf.writestr(f"sglang/srt/layers/attention/{name}", text)
            zf.writestr("sglang/srt/speculative/sub/ignored.py", "class X: ...\n")
            zf.writestr(
                f"sglang-{version}.dist-info/METADATA",
                "Name: sglang\nRequires-Dist: transformers==5.8.1\n"
                "Requires-Dist: openai==2.6.1\nRequires-Dist: av; sys_platform == 'darwin'\n",
            )
    return cache


def test_survey_offline_table_and_plot(tmp_path: Path) -> None:
    cache = _fake_cache(tmp_path)
    result = survey(["0.5.13", "0.5.14"], cache, log=lambda m: None)
    json.dumps(result)
    table = format_table(result).splitlines()
    assert table[0].split() == ["fact", "0.5.13", "0.5.14"]
    assert any(line.split()[-2:] == ["no", "yes"] and "has kv_indptr" in line for line in table)
    assert result["releases"]["0.5.13"]["facts"]["EagleDraftExtendInput has kv_indptr"]["text"] == "no"
    assert result["releases"]["0.5.14"]["facts"]["EagleDraftExtendInput has kv_indptr"]["text"] == "yes"
    assert (
        workbench_main(
            [
                "upstream",
                "--cache-dir",
                str(cache),
                "survey",
                "--versions",
                "0.5.13",
                "0.5.14",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    for suffix in ("json", "png", "svg"):
        assert (tmp_path / "out" / f"upstream_survey.{suffix}").stat().st_size > 0


def test_version_checks_name_the_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert check_version("0.5.13.post1", KNOWN) == "0.5.13.post1"
    with pytest.raises(ReleaseError, match=r"'banana'.*not a version string.*0\.5\.12"):
        check_version("banana", KNOWN)
    with pytest.raises(ReleaseError, match=r"'0\.5\.99'.*no such release.*0\.5\.14"):
        check_version("0.5.99", KNOWN)
    assert sorted(["0.5.14", "0.5.9", "0.5.13.post1", "0.5.13"], key=version_key) == [
        "0.5.9",
        "0.5.13",
        "0.5.13.post1",
        "0.5.14",
    ]
    cache = _fake_cache(tmp_path)
    assert workbench_main(["upstream", "--cache-dir", str(cache), "replay", "--sglang", "0.5.99"]) == 2
    err = capsys.readouterr().err
    assert "0.5.99" in err and "known releases" in err and "0.5.13.post1" in err


def test_replay_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _fake_cache(tmp_path)
    rec = replay_mod.replay("0.5.99", cache, log=lambda m: None)
    assert rec["status"] == "error" and rec["error"]["stage"] == "version"
    rec = replay_mod.replay("0.5.13", cache, backend="fa3", log=lambda m: None)
    assert rec["status"] == "error" and "fa3" in rec["error"]["message"]

    def broken_env(*args: object, **kwargs: object) -> None:
        raise EnvBuildError("imports", "gguf==9.9", "No matching distribution found for gguf==9.9")

    monkeypatch.setattr(replay_mod, "ensure_env", broken_env)
    rec = replay_mod.replay("0.5.13", cache, log=lambda m: None)
    assert rec["status"] == "error" and rec["error"]["missing"] == "gguf==9.9"
    assert rec["error"]["stage"] == "install:imports" and rec["crash"] is None


def test_replay_maps_driver_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _fake_cache(tmp_path)
    env = ReplayEnv(
        "0.5.13", tmp_path, Path(sys.executable), True, 0.0, {"sglang": "0.5.13"}, ["torchvision import stand-in used"]
    )
    monkeypatch.setattr(replay_mod, "ensure_env", lambda *a, **k: env)
    frame = {
        "file": "/v/lib/site-packages/sglang/srt/layers/attention/triton_backend.py",
        "line": 574,
        "function": "init_forward_metadata",
        "code": "if spec_info is None",
    }
    crashed = {
        "status": "crashed",
        "stage": "init_forward_metadata",
        "run_s": 1.0,
        "exception_type": "AttributeError",
        "message": "no kv_indptr",
        "traceback": "tb",
        "frames": [frame],
        "env": {"python": "3.11.7", "sglang": "0.5.13"},
        "batch": {},
    }
    monkeypatch.setattr(replay_mod, "run_driver", lambda *a, **k: (crashed, "", 1.5, False))
    rec = replay_mod.replay("0.5.13", cache, log=lambda m: None)
    assert rec["status"] == "crashed" and rec["timings"]["cached"] is True
    assert (rec["timings"]["run_s"], rec["timings"]["driver_s"]) == (1.5, 1.0)
    assert rec["crash"]["raised_at"]["file"] == "sglang/srt/layers/attention/triton_backend.py"
    assert rec["crash"]["rank"] == 0 and rec["crash"]["batch_size"] == 2
    assert rec["env"]["python"] == "3.11.7" and rec["notes"] == ["torchvision import stand-in used"]
    monkeypatch.setattr(replay_mod, "run_driver", lambda *a, **k: (None, "killed", 9.0, True))
    assert replay_mod.replay("0.5.13", cache, log=lambda m: None)["status"] == "timeout"


def test_driver_names_a_missing_import() -> None:
    result, _, _, timed_out = replay_mod.run_driver(Path(sys.executable), timeout_s=300)
    if result and result["status"] != "error":
        pytest.skip("sglang is importable in the test interpreter")
    assert not timed_out and result is not None
    assert (result["status"], result["stage"], result["missing"]) == ("error", "import", "sglang")


def test_dependency_pins_come_from_the_wheel(tmp_path: Path) -> None:
    wheel = _fake_cache(tmp_path) / "wheels" / "sglang-0.5.13-py3-none-any.whl"
    specs = dependency_specs("0.5.13", wheel)
    assert "transformers==5.8.1" in specs and "openai==2.6.1" in specs
    assert not any(s.startswith(("torchvision", "torch==", "av")) for s in specs)
    assert "apache-tvm-ffi" not in specs and "apache-tvm-ffi" in dependency_specs("0.5.23", wheel)


def test_torchvision_standin_imports_and_refuses_use(tmp_path: Path) -> None:
    write_standin(tmp_path)
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import torchvision, importlib.metadata as md
        from torchvision.io import decode_jpeg
        from torchvision.transforms import InterpolationMode, functional as F
        import torchvision.transforms.v2.functional as tvF
        import torchvision.transforms as T
        assert torchvision.WORKBENCH_STANDIN and InterpolationMode.BICUBIC.value == "bicubic"
        class Mine(T.Compose): pass
        try:
            decode_jpeg(b"")
        except RuntimeError as exc:
            print("refused:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "refused: torchvision.io.decode_jpeg is an eagle-workbench import stand-in" in out.stdout


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1",
    reason="network test: downloads sglang wheels from PyPI and builds a ~2.4 GiB venv per "
    "release; skipped unless WB_NETWORK_TESTS=1",
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1200)
def test_real_survey_matches_upstream_facts() -> None:
    result = survey(["0.5.11", "0.5.12", "0.5.13", "0.5.14"])
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


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.12", "0.5.13", "0.5.14"])
def test_real_replay(version: str) -> None:
    rec = replay_mod.replay(version)
    json.dumps(rec)
    assert "torchvision import stand-in used" in " ".join(rec["notes"])
    if version == "0.5.14":
        assert rec["status"] == "ok", rec.get("error")
        assert rec["metrics"]["kv_indptr"] == [0, 1, 2]
        return
    assert rec["status"] == "crashed", rec.get("error")
    crash = rec["crash"]
    assert (
        f"{crash['exception_type']}: {crash['message']}"
        == "AttributeError: 'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
    )
    assert crash["raised_at"]["file"].endswith("layers/attention/triton_backend.py")
    assert "triton_backend.py" in crash["traceback"]
    assert (crash["rank"], crash["phase"], crash["forward_mode"], crash["batch_size"]) == (0, "draft-extend", "IDLE", 2)


def test_replay_venvs_take_torch_from_torch_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """$TORCH_INDEX (the Makefile's and the workflow's) reaches the replay venvs' torch install: the pin
    from that index without its dependencies (which the next install brings from pip's usual indexes)."""
    from workbench.upstream.env import TORCH_PIN, torch_args

    monkeypatch.delenv("TORCH_INDEX", raising=False)
    assert torch_args() == [TORCH_PIN]
    monkeypatch.setenv("TORCH_INDEX", "https://download.pytorch.org/whl/cpu")
    assert torch_args() == [TORCH_PIN, "--index-url", "https://download.pytorch.org/whl/cpu", "--no-deps"]
