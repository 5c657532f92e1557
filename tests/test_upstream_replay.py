"""Replays of the real releases: offline on fake caches and a stubbed driver, real ones on the network."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from upstream_fixtures import write_fake_cache

from workbench.upstream import release_replay as replay_mod
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.sources.envs import EnvBuildError, ReplayEnv

FILES = {"sglang/srt/speculative/eagle_info.py": "class SpecInput: ...\n"}


def test_replay_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = UpstreamContext(cache_dir=write_fake_cache(tmp_path, {"0.5.13": FILES}), log=quiet)
    rec = replay_mod.replay(ctx, "0.5.99")
    assert rec["status"] == "error" and rec["error"]["stage"] == "version"
    rec = replay_mod.replay(ctx, "0.5.13", backend="fa3")
    assert rec["status"] == "error" and "fa3" in rec["error"]["message"]

    def broken_env(*args: object, **kwargs: object) -> None:
        raise EnvBuildError("imports", "gguf==9.9", "No matching distribution found for gguf==9.9")

    monkeypatch.setattr(replay_mod, "ensure_env", broken_env)
    rec = replay_mod.replay(ctx, "0.5.13")
    assert rec["status"] == "error" and rec["error"]["missing"] == "gguf==9.9"
    assert rec["error"]["stage"] == "install:imports" and rec["crash"] is None


def test_replay_maps_driver_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = UpstreamContext(cache_dir=write_fake_cache(tmp_path, {"0.5.13": FILES}), log=quiet)
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
    rec = replay_mod.replay(ctx, "0.5.13")
    assert rec["status"] == "crashed" and rec["timings"]["cached"] is True
    assert (rec["timings"]["run_s"], rec["timings"]["driver_s"]) == (1.5, 1.0)
    assert rec["crash"]["raised_at"]["file"] == "sglang/srt/layers/attention/triton_backend.py"
    assert rec["crash"]["rank"] == 0 and rec["crash"]["batch_size"] == 2
    assert rec["env"]["python"] == "3.11.7" and rec["notes"] == ["torchvision import stand-in used"]
    monkeypatch.setattr(replay_mod, "run_driver", lambda *a, **k: (None, "killed", 9.0, True))
    assert replay_mod.replay(ctx, "0.5.13")["status"] == "timeout"


def test_driver_names_a_missing_import() -> None:
    result, _, _, timed_out = replay_mod.run_driver(Path(sys.executable), timeout_s=300)
    if result and result["status"] != "error":
        pytest.skip("sglang is importable in the test interpreter")
    assert not timed_out and result is not None
    assert (result["status"], result["stage"], result["missing"]) == ("error", "import", "sglang")


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1",
    reason="network test: downloads sglang wheels from PyPI and builds a ~2.4 GiB venv per "
    "release; skipped unless WB_NETWORK_TESTS=1",
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.12", "0.5.13", "0.5.14"])
def test_real_replay(version: str) -> None:
    rec = replay_mod.replay(UpstreamContext(log=quiet), version)
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
