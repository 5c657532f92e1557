"""The replay module: the seed run record and the driver launch offline (fake caches, a stubbed
front end, the test interpreter as a release env without sglang); real releases on the network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from upstream_fixtures import write_fake_cache

from workbench.run.serialise import RecordError, to_dict
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.replay import records
from workbench.upstream.replay.cases import SEED_CASE
from workbench.upstream.replay.driver import run_driver
from workbench.upstream.sources.envs import EnvBuildError, ReleaseEnv

FILES = {"sglang/srt/speculative/eagle_info.py": "class SpecInput: ...\n"}
MESSAGE = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"


def _ctx(tmp_path: Path) -> UpstreamContext:
    return UpstreamContext(cache_dir=write_fake_cache(tmp_path, {"0.5.13": FILES}), log=quiet)


def test_seed_record_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path)
    rec = records.seed_record(ctx, "0.5.99")
    assert rec["status"] == "error" and rec["error"]["stage"] == "version"
    rec = records.seed_record(ctx, "0.5.13", backend="fa3")
    assert rec["status"] == "error" and "fa3" in rec["error"]["message"]

    def broken_env(*args: object, **kwargs: object) -> None:
        raise EnvBuildError("imports", "gguf==9.9", "No matching distribution found for gguf==9.9")

    monkeypatch.setattr(records, "ensure_env", broken_env)
    rec = records.seed_record(ctx, "0.5.13")
    assert rec["status"] == "error" and rec["error"]["missing"] == "gguf==9.9"
    assert rec["error"]["stage"] == "install:imports" and rec["crash"] is None


def test_seed_record_maps_the_front_ends_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _ctx(tmp_path)
    env = ReleaseEnv("0.5.13", tmp_path, Path(sys.executable), True, 0.0, {"sglang": "0.5.13"}, ["stand-in used"])
    monkeypatch.setattr(records, "ensure_env", lambda *a, **k: env)
    frame = {
        "at": "sglang/srt/layers/attention/triton_backend.py:574",
        "function": "init_forward_metadata",
        "code": "x",
    }
    raised = {"status": "crashed", "exception": "AttributeError", "message": MESSAGE, "frames": [frame]}
    seen = []

    def front(ctx, target, cases, **kw):
        seen.append((target, cases))
        return {
            "status": "ok",
            "run_s": 1.5,
            "driver_s": 1.0,
            "env": {"python": "3.11.7"},
            "cases": [{"runs": [raised]}],
        }

    monkeypatch.setattr(records, "replay", front)
    rec = records.seed_record(ctx, "0.5.13")
    assert seen[0][0] == "0.5.13" and seen[0][1][0]["spec_class"] == SEED_CASE["spec_class"]
    assert seen[0][1][0]["answer_missing"] is False  # the record is the crash as released, nothing answered
    assert rec["status"] == "crashed" and rec["timings"]["cached"] is True
    assert (rec["timings"]["run_s"], rec["timings"]["driver_s"]) == (1.5, 1.0)
    assert rec["crash"]["raised_at"]["file"] == "sglang/srt/layers/attention/triton_backend.py"
    assert rec["crash"]["raised_at"]["line"] == 574
    assert (rec["crash"]["rank"], rec["crash"]["batch_size"]) == (0, 2) and "stand-in used" in rec["notes"]
    done = {"status": "ok", "metrics": {"kv_indptr": [0, 1, 2], "kv_indices": [1, 1]}}
    monkeypatch.setattr(records, "replay", lambda *a, **k: {"status": "ok", "run_s": 1, "cases": [{"runs": [done]}]})
    rec = records.seed_record(ctx, "0.5.13")
    assert rec["status"] == "ok" and rec["metrics"]["kv_indptr"] == [0, 1, 2]
    monkeypatch.setattr(records, "replay", lambda *a, **k: {"status": "timeout", "run_s": 9, "cases": []})
    assert records.seed_record(ctx, "0.5.13")["status"] == "timeout"


def test_the_driver_names_a_missing_import(tmp_path: Path) -> None:
    """The driver launched under an interpreter without sglang reports where and what, never hangs."""
    run = run_driver(UpstreamContext(cache_dir=tmp_path, log=quiet, timeout_s=300), Path(sys.executable), {})
    if run.result and run.result["status"] != "error":
        pytest.skip("sglang is importable in the test interpreter")
    assert not run.timed_out and run.result is not None, run.stderr
    assert (run.result["status"], run.result["stage"], run.result["missing"]) == ("error", "import", "sglang")


def test_the_driver_writes_its_temp_files_in_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the release writes to its temp dir (importing sglang makes torch's torchinductor_<user>)
    goes to the driver's working folder, removed with it, not to the caller's temp dir."""
    caller_tmp = tmp_path / "caller-tmp"
    caller_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(caller_tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    fake = tmp_path / "python"
    fake.write_text(  # a stand-in interpreter: the config (its last argument) names the result file
        f"#!{sys.executable}\nimport json, os, sys\n"
        "os.mkdir(os.path.join(os.environ['TMPDIR'], 'torchinductor_test'))\n"
        "cfg = json.load(open(sys.argv[-1]))\n"
        "json.dump({'tmpdir': os.environ['TMPDIR'], 'cwd': os.getcwd()}, open(cfg['result_path'], 'w'))\n"
    )
    fake.chmod(0o755)
    run = run_driver(UpstreamContext(cache_dir=tmp_path, log=quiet), fake, {})
    assert run.result is not None, run.stderr
    assert run.result["tmpdir"] == run.result["cwd"] and run.result["cwd"].startswith(str(caller_tmp))
    assert list(caller_tmp.iterdir()) == []


def test_a_driver_that_cannot_start_is_a_result(tmp_path: Path) -> None:
    run = run_driver(UpstreamContext(cache_dir=tmp_path, log=quiet), tmp_path / "no-python", {})
    assert run.result is None and "could not start" in run.stderr


@pytest.mark.network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.12", "0.5.13", "0.5.14"])
def test_real_seed_record(version: str) -> None:
    rec = records.seed_record(UpstreamContext(log=quiet), version)
    json.dumps(rec)
    assert any("torchvision import stand-in" in n for n in rec["notes"])
    if version == "0.5.14":
        assert rec["status"] == "ok", rec.get("error")
        assert rec["metrics"]["kv_indptr"] == [0, 1, 2]
        return
    assert rec["status"] == "crashed", rec.get("error")
    crash = rec["crash"]
    assert f"{crash['exception_type']}: {crash['message']}" == f"AttributeError: {MESSAGE}"
    assert crash["raised_at"]["file"].endswith("layers/attention/triton_backend.py")
    assert "triton_backend.py" in crash["traceback"]
    assert (crash["rank"], crash["phase"], crash["forward_mode"], crash["batch_size"]) == (0, "draft-extend", "IDLE", 2)


def test_every_shipped_seed_replay_reads_as_a_replay_record_and_writes_back_unchanged() -> None:
    """``upstream_replays.json`` (0.5.12 and 0.5.13 crashed, 0.5.14 ok) reads strictly as ``ReplayRecord``s,
    and their JSON forms are the shipped entries, key for key and in order; a bad field is named."""
    shipped = json.loads((Path(records.__file__).parents[2] / "assets" / "upstream_replays.json").read_text())
    recs = [records.read_replay_record(r) for r in shipped]
    assert [(r.config.sglang, r.status) for r in recs] == [
        ("0.5.12", "crashed"),
        ("0.5.13", "crashed"),
        ("0.5.14", "ok"),
    ]
    assert recs[0].crash.raised_at["line"] == 332 and recs[2].metrics["kv_indptr"] == [0, 1, 2]
    assert [json.dumps(to_dict(r)) for r in recs] == [json.dumps(r) for r in shipped]
    with pytest.raises(RecordError, match=r"ReplayRecord.status: invalid value 'raised'"):
        records.read_replay_record({**shipped[0], "status": "raised"})
