"""``scripts/ship_bundle_replay.py`` writes the shipped bundle replay only when the run crashed and every
release's replay agrees with the bundle, with the provenance the replay's output lacks. The replay (a
release environment) is a stand-in here (recorded calls), and so is the run except in the last test, which
runs it; the live replay is the catalogued command (``make assets``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import workbench.cli
from workbench.run.provenance import workbench_commit

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wb_ship_bundle_replay", ROOT / "scripts" / "ship_bundle_replay.py")
ship = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ship)

ABOUT = {"status": "crashed", "crash": {"rank": 1, "phase": "draft-extend"}}
REPLAYED = {
    "measured_at": "2026-12-05T11:00:00+00:00",
    "bundle": "/scratch/run-x/crash-bundle-rank1",
    "bundle_sha256": "ab" * 32,
    "bundle_meta": {"rank": 1},
    "reference": {"kv_indptr": [0, 1, 2], "kv_indices": [17, 17]},
    "releases": {"0.5.13": {"status": "crashed", "same_exception_as_bundle": True}},
}


@pytest.fixture()
def stand_ins(tmp_path, monkeypatch):
    """The run leaves a bundle folder; the replay command (stand-in) records its argv and writes REPLAYED."""
    calls: dict = {"rc": 0, "argv": None, "scratch": None}

    def run(scratch: Path):
        calls["scratch"] = scratch
        folder = scratch / "run-x" / "crash-bundle-rank1"
        folder.mkdir(parents=True)
        return folder, ABOUT

    def replay(argv: list[str]) -> int:
        calls["argv"] = argv
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(REPLAYED))
        return calls["rc"]

    monkeypatch.setattr(ship, "crash_bundle", run)
    monkeypatch.setattr(workbench.cli, "main", replay)
    return calls


def test_the_asset_is_the_replays_output_with_its_provenance(stand_ins, tmp_path):
    out = tmp_path / "replay.json"
    assert ship.main(["--sglang", "0.5.13", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert stand_ins["argv"][:4] == [
        "upstream",
        "replay",
        "--bundle",
        str(stand_ins["scratch"] / "run-x" / "crash-bundle-rank1"),
    ]
    assert stand_ins["argv"][4:6] == ["--sglang", "0.5.13"]
    assert doc["workbench_commit"] == workbench_commit() and doc["shipped"] is True
    assert doc["command"] == f"python scripts/ship_bundle_replay.py --sglang 0.5.13 --out {out}"
    assert doc["bundle"].startswith("crash-bundle-rank1 (written by bundle_run") and doc["bundle_run"] == ABOUT
    assert {k: doc[k] for k in REPLAYED if k != "bundle"} == {k: v for k, v in REPLAYED.items() if k != "bundle"}
    assert not stand_ins["scratch"].exists()  # the scratch folder, the bundle with it, is removed


def test_a_replay_that_disagrees_with_the_bundle_writes_nothing(stand_ins, tmp_path, capsys):
    stand_ins["rc"] = 1
    out = tmp_path / "replay.json"
    assert ship.main(["--out", str(out)]) == 1
    assert not out.exists() and f"the replay ended 1: nothing written to {out}" in capsys.readouterr().err
    assert stand_ins["argv"][4:7] == ["--sglang", "0.5.13", "0.5.14"]  # the default releases


def test_a_run_without_a_bundle_writes_nothing(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(ship, "crash_bundle", lambda scratch: (None, {"status": "ok", "crash": None}))
    out = tmp_path / "replay.json"
    assert ship.main(["--out", str(out)]) == 1
    assert not out.exists() and 'the run did not leave a crash bundle: {"status": "ok"' in capsys.readouterr().err


def test_the_run_leaves_the_crashing_ranks_bundle_and_says_how_it_ended(tmp_path):
    """The real workbench run (not a stand-in): rank 1's idle draft-extend crash, its bundle folder."""
    bundle, about = ship.crash_bundle(tmp_path / "scratch")
    assert about["status"] == "crashed" and bundle is not None and bundle.name == "crash-bundle-rank1"
    assert (bundle / "bundle.json").is_file() and (bundle / "tensors.safetensors").is_file()
    assert about["crash"]["rank"] == 1 and about["crash"]["phase"] == "draft-extend"
    assert about["crash"]["forward_mode"] == "IDLE" and "kv_indptr" in about["crash"]["message"]
    assert about["workbench_commit"] and about["kernel"].startswith("triton")
