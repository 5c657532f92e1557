"""A finding as a record (``static/finding.py``): the lint's whole finding and the shipped compact one read
strictly through ``workbench.run.serialise`` and write back key for key, in order."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from upstream_fixtures import toy_tree

from workbench.run.serialise import ABSENT, RecordError, to_dict
from workbench.upstream.replay.cases import case_key
from workbench.upstream.replay.verdicts import decide
from workbench.upstream.static.finding import (
    Finding,
    Install,
    Reachability,
    ReplayRun,
    ShippedFinding,
    read_finding,
    read_findings,
)
from workbench.upstream.static.lint import analyse

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "workbench" / "assets" / "upstream_findings.json"


def _ship():
    spec = importlib.util.spec_from_file_location("wb_ship_upstream_finding", ROOT / "scripts" / "ship_upstream.py")
    ship = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ship)
    return ship


def _same(record: Finding | ShippedFinding, data: dict) -> bool:
    return json.dumps(to_dict(record)) == json.dumps(data)


def test_every_shipped_finding_reads_as_a_shipped_finding_and_writes_back_unchanged() -> None:
    """All of ``upstream_findings.json``'s findings, with their replay runs (``status``, ``stopped_at``) and
    the keys only some carry (``replay_verdict``, ``static_verdict``)."""
    shipped = json.loads(SHIPPED.read_text())["findings"]
    found = read_findings(shipped, "upstream_findings.json")
    assert all(isinstance(f, ShippedFinding) for f in found) and len(found) == len(shipped) > 900
    assert all(_same(f, d) for f, d in zip(found, shipped, strict=True))
    kept = [f for f in found if f.replay_verdict]
    overridden = [f for f in found if f.static_verdict]
    assert kept and overridden and all(f.verdict == "unreachable" for f in kept)
    assert all(f.static_reason and f.replay_verdict is ABSENT for f in overridden)
    runs = [f.replay for f in found if f.replay]
    assert {(r.status, r.stopped_at) for r in runs} >= {("crashed", None), ("ok", None), ("ok", "library call")}
    assert all(r.outcome is ABSENT for r in runs)  # shipped in today's words since 7b79cf4
    reached = [f.reachability for f in found if f.reachability]
    assert reached and all(isinstance(r, Reachability) and r.end_to_end is ABSENT for r in reached)


def test_a_shipped_finding_whose_replay_was_written_before_status_still_reads_and_writes_back() -> None:
    """A file shipped before the replay run said ``status`` (its ``outcome``; ``replay/run_end.py``)."""
    data = next(f for f in json.loads(SHIPPED.read_text())["findings"] if f.get("replay"))
    replay = {k: v for k, v in data["replay"].items() if k not in ("status", "stopped_at")}
    old = {**data, "replay": {**replay, "outcome": "raised"}}
    found = read_finding(old)
    assert isinstance(found, ShippedFinding) and found.replay.outcome == "raised" and found.replay.status is ABSENT
    assert to_dict(found)["replay"] == old["replay"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"verdict": 3}, "ShippedFinding.verdict: 3 fits none of"),
        ({"colour": "red"}, "ShippedFinding: unknown key(s) ['colour']"),
        ({"read_line": "12"}, "ShippedFinding.read_line: expected int, got '12'"),
        ({"runner_paths": {"reaches": "1"}}, "ShippedFinding.runner_paths['reaches']: expected int"),
    ],
)
def test_a_bad_shipped_finding_is_named_with_its_field(change: dict, message: str) -> None:
    first = json.loads(SHIPPED.read_text())["findings"][0]
    with pytest.raises(RecordError) as e:
        read_findings([first, {**first, **change}], "upstream_findings.json")
    assert str(e.value).startswith("upstream_findings.json[1]: ") and message in str(e.value)
    replay = {**first["replay"], "stand_ins": ["not an index"]}
    with pytest.raises(RecordError, match=r"ShippedFinding.replay.*stand_ins\[0\]: expected int"):
        read_finding({**first, "replay": replay})


def test_the_lints_finding_reads_as_a_finding_with_its_installs_and_writes_back_unchanged() -> None:
    data = analyse(toy_tree(with_field=False))["findings"][0]
    f = read_finding(data)
    assert isinstance(f, Finding) and _same(f, data)
    assert f.installs == [
        Install(
            file="sglang/srt/speculative/worker.py",
            line=7,
            function=f.install_function,
            kind="helper",
            mode_from=f.installs[0].mode_from,
            batch=f.installs[0].batch,
        )
    ]
    assert f.replay is ABSENT and "replay" not in to_dict(f) and f.read_at == f"{f.read_file}:{f.read_line}"
    with pytest.raises(RecordError, match=r"Finding.installs\[0\]: missing required field\(s\) \['kind'"):
        read_finding({**data, "installs": [{"file": "a.py", "line": 1, "function": "f", "mode_from": "x"}]})


def _case(data: dict, runs: list[dict]) -> dict:
    return {
        "case": {"key": case_key(data), "backend_class": data["backend_class"], "batch": "IDLE padded"},
        "built_by": f"{data['spec_class']}.create_idle_input",
        "batch": {"kind": "IDLE padded", "batch_size": 2},
        "stand_ins": ["flashinfer stubbed"],
        "runs": runs,
    }


def test_a_replayed_finding_keeps_its_keys_in_the_order_each_step_adds_them_and_ships_compact() -> None:
    """A confirmation (``replay``), a static verdict that stands (``replay`` then ``replay_verdict``), one a
    confirmation overrides (``static_verdict`` before ``replay``), and the end-to-end step's key."""
    data = analyse(toy_tree(with_field=False))["findings"][0]
    at = data["read_file"] + ":" + str(data["read_line"])
    crash = {"status": "crashed", "exception": "AttributeError", "message": "no kv_indptr", "missing_attr": "kv_indptr"}
    raised = {case_key(data): _case(data, [{**crash, "raised_at": at, "ran": [at], "answered": []}])}
    done = {case_key(data): _case(data, [{"status": "ok", "ran": [], "answered": []}])}
    static = {**data, "verdict": "unreachable", "verdict_reason": "no runner path", "verdict_by": "runner paths"}
    for out in (
        decide(data, raised, {"status": "ok"}),
        decide(static, done, {"status": "ok"}),
        decide(static, raised, {"status": "ok"}),
        {**decide(data, {}, {"status": "error", "message": "no environment"}), "end_to_end": None},
    ):
        f = read_finding(out)
        assert isinstance(f, Finding) and _same(f, out), list(out)
    confirmed = read_finding(decide(data, raised, {"status": "ok"}))
    assert isinstance(confirmed.replay, ReplayRun) and (confirmed.replay.status, confirmed.verdict) == (
        "crashed",
        "confirmed",
    )
    stand_ins = ["earlier stand-in"]
    slim = _ship()._slim(confirmed, stand_ins)
    assert (slim.installs, slim.install_sites, slim.replay.stand_ins) == (
        1,
        ["speculative/worker.py:" + confirmed.install_function],
        [1],
    )
    assert stand_ins == ["earlier stand-in", "flashinfer stubbed"] and slim.replay.outcome is ABSENT
    written = to_dict(slim)
    shipped_order = list(json.loads(SHIPPED.read_text())["findings"][0])
    assert list(written) == shipped_order and _same(read_finding(written), written)
    assert list(written["replay"])[3:5] == ["status", "stopped_at"] and written["replay"]["stopped_at"] is None
