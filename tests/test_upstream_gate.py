"""The gate: --fail-on rules against the triage file, exit codes, SARIF, and the lane failing closed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from upstream_fixtures import toy_tree, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.upstream import gate, lane
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.gate import GateError, build_triage, judge, load_triage, not_filed, ran_problems
from workbench.upstream.sources.releases import ReleaseError
from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.lint import analyse
from workbench.views.upstream import lane_html

SEED = "toy|IDLE|DraftExtendInput|kv_indptr|Backend.init_forward_metadata"


def _finding(release: str = "0.5.14", verdict: str | None = None) -> dict:
    f = analyse(toy_tree(with_field=False))["findings"][0]
    return {**f, "release": release, "verdict": verdict}


def _entry(**kw) -> dict:
    return {"verdict": "refuted", "reason": "toy", "link": None, "fixed_in": None, "live": False, **kw}


def _triage_file(tmp_path: Path, entries: dict) -> Path:
    path = tmp_path / "triage.json"
    path.write_text(json.dumps({"schema": "upstream-triage/2", "produced_by": {}, "entries": entries}))
    return path


def test_fail_on_new_covers_each_rule() -> None:
    f = _finding()
    assert f["key"] == SEED
    assert judge([f], {}, "new", "0.5.14")[0]["gate"] == "new: not in the triage file"
    assert judge([f], {SEED: _entry()}, "new", "0.5.14") == []
    fixed = {SEED: _entry(verdict="confirmed", fixed_in="0.5.14", link="https://example.org/pr/1")}
    assert judge([_finding("0.5.13", "confirmed")], fixed, "new", "0.5.14") == []  # before its fix: known
    why = judge([_finding("0.5.14")], fixed, "new", "0.5.14")[0]["gate"]
    assert why.startswith("reappeared: fixed in 0.5.14 (https://example.org/pr/1)")
    assert judge([_finding("0.5.12", "confirmed")], {SEED: _entry()}, "new", "0.5.14")[0]["gate"] == (
        "a replay now confirms it; the triage file says refuted"
    )
    live = {SEED: _entry(verdict="confirmed")}
    assert "known and live" in judge([_finding("0.5.14", "confirmed")], live, "new", "0.5.14")[0]["gate"]
    live[SEED]["live"] = True
    assert "neither an upstream link" in judge([_finding("0.5.14", "confirmed")], live, "new", "0.5.14")[0]["gate"]
    assert judge([_finding("0.5.13", "confirmed")], live, "new", "0.5.14") == []  # an older release
    live[SEED].update(live=True, link="https://example.org/issues/2")
    assert judge([_finding("0.5.14", "confirmed")], live, "new", "0.5.14") == []
    assert len(judge([_finding("0.5.14", "confirmed")], live, "confirmed", "0.5.14")) == 1
    assert judge([_finding("0.5.14", "refuted")], live, "confirmed", "0.5.14") == []
    assert len(judge([_finding("0.5.14", "refuted")], live, "any", "0.5.14")) == 1
    with pytest.raises(GateError, match="'sometimes'"):
        judge([f], {}, "sometimes", None)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"verdict": "maybe", "reason": "x"}, "verdict 'maybe'"),
        ({"verdict": "refuted", "reason": ""}, "no reason"),
        ({"verdict": "refuted", "reason": "x", "fixed_in": "soon"}, "fixed_in 'soon'"),
        ({"verdict": "refuted", "reason": "x", "link": "github.com/x"}, "not an https address"),
        ({"verdict": "confirmed", "reason": "x", "link": "workbench/assets/r", "live": True}, "filed_upstream: false"),
        ({"verdict": "confirmed", "reason": "x", "link": "/abs/r", "filed_upstream": False}, "inside it"),
        ({"verdict": "confirmed", "reason": "x", "link": "../r", "filed_upstream": False}, "inside it"),
        ({"verdict": "confirmed", "reason": "x", "filed_upstream": "no"}, "filed_upstream is not"),
    ],
)
def test_bad_triage_entries_are_refused(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(GateError, match=message):
        load_triage(_triage_file(tmp_path, {SEED: entry}))
    with pytest.raises(GateError, match="backend\\|mode"):
        load_triage(_triage_file(tmp_path, {"toy|IDLE": _entry()}))


def _reproducer(root: Path, name: str, key: str, files: tuple[str, ...] = gate.REPRO_FILES) -> str:
    folder = root / "workbench" / "assets" / "upstream_repro" / name
    folder.mkdir(parents=True)
    for file in files:
        (folder / file).write_text(json.dumps({"key": key}) if file == "result.json" else "x")
    return str(folder.relative_to(root))


def test_a_live_finding_not_filed_upstream_passes_only_on_its_shipped_reproducer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate, "ROOT", tmp_path)
    found = [_finding("0.5.14", "confirmed")]
    entry = _entry(verdict="confirmed", live=True, filed_upstream=False)
    cases = {
        _reproducer(tmp_path, "ok", SEED): None,
        "workbench/assets/upstream_repro/absent": "does not exist",
        _reproducer(tmp_path, "no-script", SEED, ("fix.diff", "result.json")): "lacks repro.py",
        _reproducer(tmp_path, "other", "toy|IDLE|Other|kv_indptr|f"): "not of this finding",
        None: "neither an upstream link nor a shipped reproducer folder",
    }
    for link, why in cases.items():
        triage = {SEED: {**entry, "link": link}}
        failing = judge(found, triage, "new", "0.5.14")
        if why is None:
            assert failing == [] and not_filed(found, triage, "0.5.14")[0]["link"] == link
            assert gate.not_filed_lines(not_filed(found, triage, "0.5.14"))[0].startswith("live, not filed upstream:")
        else:
            assert len(failing) == 1 and why in failing[0]["gate"], (link, failing)
            assert not_filed(found, triage, "0.5.14") == []
    ok = {SEED: {**entry, "link": "workbench/assets/upstream_repro/ok"}}
    assert not_filed(found, ok, "0.5.15") == []  # not the newest release: nothing to say
    assert load_triage(_triage_file(tmp_path, ok))[SEED]["filed_upstream"] is False


def test_shipped_not_filed_entries_hold_their_reproducers() -> None:
    shipped = load_triage()
    unfiled = {k: e for k, e in shipped.items() if e.get("filed_upstream") is False}
    assert {k.split("|")[2] for k in unfiled} == {"EagleVerifyInput", "FrozenKVMTPVerifyInput", "PPSpecRelayInput"}
    for key, e in unfiled.items():
        assert e["live"] and e["verdict"] == "confirmed" and "not filed upstream" in e["note"]
        assert gate.reproducer_problem(e["link"], key) is None, key
        result = json.loads((gate.ROOT / e["link"] / "result.json").read_text())
        assert result["reproduced"] and result["fixed"], key


def test_shipped_triage_file_loads_and_carries_the_seed_fix() -> None:
    shipped = load_triage()
    seed = shipped["triton|IDLE|EagleDraftExtendInput|kv_indptr|TritonAttnBackend.init_forward_metadata"]
    assert seed["verdict"] == "confirmed" and seed["fixed_in"] == "0.5.14" and "28221" in seed["link"]


def test_build_triage_computes_fixed_in_and_keeps_hand_fields() -> None:
    old = _finding("0.5.12", "confirmed")
    result = {
        "generated_at": "now",
        "results": [{"source": "sglang 0.5.12"}, {"source": "sglang 0.5.13"}],
        "findings": [old],
    }
    doc = build_triage(result, {SEED: {"link": "https://example.org/pr/1", "note": "seed"}}, "cmd", "abc")
    entry = doc["entries"][SEED]
    assert (entry["releases"], entry["fixed_in"], entry["link"], entry["note"]) == (
        ["0.5.12"],
        "0.5.13",
        "https://example.org/pr/1",
        "seed",
    )
    assert doc["produced_by"]["workbench_commit"] == "abc"
    # a previous fixed_in the findings contradict (the finding is still there at or after it) is dropped
    result["findings"] = [old, _finding("0.5.13", "confirmed")]
    doc = build_triage(result, {SEED: {"fixed_in": "0.5.13"}}, "cmd", "abc")
    assert doc["entries"][SEED]["fixed_in"] is None


def test_a_check_that_read_nothing_is_a_problem() -> None:
    empty = {"source": "x", "lint": {"backend_classes": 0, "spec_inputs": {}, "installs": [], "forward_modes": []}}
    problems = ran_problems({"results": [{**empty, "findings": []}]}, replay=False)
    assert any("read no attention backend" in p for p in problems) and len(problems) == 4
    assert ran_problems({"results": []}, replay=False) == ["no source was linted"]
    ok = {"backend_classes": 1, "spec_inputs": {"A": 1}, "installs": [1], "forward_modes": ["IDLE"]}
    replayed = {"source": "x", "lint": ok, "findings": [{"key": "k", "verdict": None}], "replay": {"status": "error"}}
    problems = ran_problems({"results": [replayed]}, replay=True)
    assert problems[0].startswith("x: the replay did not run") and "got no verdict" in problems[1]


def _checkout(tmp_path: Path, with_field: bool) -> Path:
    return toy_tree(with_field).write(tmp_path / ("fixed" if with_field else "regressed"))


def test_lint_exit_codes_and_sarif(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cache = write_fake_cache(tmp_path, {})
    base = ["--cache-dir", str(cache), "lint", "--sglang-src"]
    regressed = _checkout(tmp_path, with_field=False)
    sarif = tmp_path / "out.sarif"
    empty = _triage_file(tmp_path, {})
    assert (
        workbench_main(
            ["upstream", *base, str(regressed), "--fail-on", "new", "--triage", str(empty), "--sarif", str(sarif)]
        )
        == 1
    )
    assert f"FAIL {SEED}" in capsys.readouterr().out
    log = json.loads(sarif.read_text())
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    (res,) = run["results"]
    where = res["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {
        "uri": "python/sglang/srt/layers/attention/toy_backend.py",
        "uriBaseId": "SRCROOT",
    }
    assert where["region"]["startLine"] == 18 and res["level"] == "error"
    assert res["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("speculative/worker.py")
    assert (
        res["partialFingerprints"]["findingKey/v1"] == SEED and run["tool"]["driver"]["rules"][0]["id"] == res["ruleId"]
    )
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == regressed.resolve().as_uri() + "/"
    known = _triage_file(tmp_path, {SEED: _entry()})
    assert workbench_main(["upstream", *base, str(regressed), "--fail-on", "new", "--triage", str(known)]) == 0
    assert workbench_main(["upstream", *base, str(regressed), "--fail-on", "any", "--triage", str(known)]) == 1
    assert workbench_main(["upstream", *base, str(_checkout(tmp_path, with_field=True)), "--fail-on", "any"]) == 0
    assert workbench_main(["upstream", *base, str(regressed)]) == 0  # no --fail-on: findings are reported, not judged


def test_lint_that_reads_nothing_or_a_bad_triage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cache = write_fake_cache(tmp_path, {})
    bare = memory_tree({"sglang/srt/speculative/eagle_info.py": "class SpecInput: ...\n"}).write(tmp_path / "bare")
    assert (
        workbench_main(["upstream", "--cache-dir", str(cache), "lint", "--sglang-src", str(bare), "--fail-on", "new"])
        == 2
    )
    assert "read no attention backend" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    regressed = _checkout(tmp_path, with_field=False)
    argv = ["--cache-dir", str(cache), "lint", "--sglang-src", str(regressed), "--fail-on", "new", "--triage", str(bad)]
    assert workbench_main(["upstream", *argv]) == 2
    assert "schema None" in capsys.readouterr().err


def _fake_check(findings: list[dict], replay_status: str = "ok", e2e_status: str = "ok"):
    lint = {"backend_classes": 1, "spec_inputs": {"A": {}}, "installs": [1], "forward_modes": ["IDLE"]}

    def check(ctx, versions, src=None, replay=True, end_to_end=False):
        assert end_to_end, "the lane judges the end-to-end verdicts"
        res = {
            "source": f"sglang {versions[0]}",
            "lint": lint,
            "findings": findings,
            "replay": {"status": replay_status},
            "end_to_end": {"status": e2e_status, "message": "a run timed out", "verdicts": {}, "run_s": 1.0},
        }
        return {"generated_at": "now", "findings": findings, "results": [res]}

    return check


def test_lane_passes_fails_and_fails_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.upstream import guard

    ctx = UpstreamContext(cache_dir=write_fake_cache(tmp_path, {}), log=quiet)
    triage = _triage_file(tmp_path, {SEED: _entry()})
    history = tmp_path / "history.jsonl"
    monkeypatch.setattr(guard, "check", _fake_check([_finding("0.5.14", "refuted")]))
    night = lane.run_lane(ctx, tmp_path / "n1", history, triage, "0.5.14")
    assert (night["verdict"], lane.EXIT[night["verdict"]]) == ("pass", 0)
    monkeypatch.setattr(guard, "check", _fake_check([_finding("0.5.14", "confirmed")]))
    night = lane.run_lane(ctx, tmp_path / "n2", history, triage, "0.5.14")
    assert (night["verdict"], lane.EXIT[night["verdict"]]) == ("fail", 1)
    monkeypatch.setattr(guard, "check", _fake_check([], replay_status="error"))
    night = lane.run_lane(ctx, tmp_path / "n3", history, triage, "0.5.14")
    assert (night["verdict"], lane.EXIT[night["verdict"]]) == ("error", 2)
    monkeypatch.setattr(guard, "check", _fake_check([_finding("0.5.14", "refuted")], e2e_status="error"))
    undecided = lane.run_lane(ctx, tmp_path / "n3b", None, triage, "0.5.14")
    assert undecided["verdict"] == "error" and undecided["end_to_end"]["status"] == "error"
    assert "could not decide a finding end to end: a run timed out" in undecided["problems"][0]

    def no_pypi(*a, **k):
        raise ReleaseError("could not ask PyPI for the sglang releases: offline")

    monkeypatch.setattr(lane, "latest_release", no_pypi)
    night = lane.run_lane(ctx, tmp_path / "n4", history, triage)
    assert night["verdict"] == "error" and "offline" in night["problems"][0]
    nights = lane.read_history(history)
    assert [n["verdict"] for n in nights] == ["pass", "fail", "error", "error"]
    page = lane_html(night, nights)
    assert "could not run" in page and page.count("<tr><td>") >= 4  # the history shows every night
    assert json.loads((tmp_path / "n2" / lane.LANE_JSON).read_text())["failing"][0]["gate"].startswith(
        "a replay now confirms"
    )


def test_the_lane_reports_a_live_finding_not_filed_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.upstream import guard

    monkeypatch.setattr(gate, "ROOT", tmp_path)
    ctx = UpstreamContext(cache_dir=write_fake_cache(tmp_path, {}), log=quiet)
    entry = _entry(verdict="confirmed", live=True, filed_upstream=False, link=_reproducer(tmp_path, "seed", SEED))
    monkeypatch.setattr(guard, "check", _fake_check([_finding("0.5.14", "confirmed")]))
    night = lane.run_lane(ctx, tmp_path / "n1", tmp_path / "h.jsonl", _triage_file(tmp_path, {SEED: entry}), "0.5.14")
    assert night["verdict"] == "pass" and [r["key"] for r in night["not_filed"]] == [SEED]
    assert "live, not filed upstream: " + SEED in lane.format_text(night)
    assert "Live, not filed upstream" in lane_html(night, lane.read_history(tmp_path / "h.jsonl"))
    assert lane.read_history(tmp_path / "h.jsonl")[0]["not_filed"] == [SEED]
    (tmp_path / entry["link"] / "repro.py").unlink()  # the reproducer gone: the same night fails
    night = lane.run_lane(ctx, tmp_path / "n2", None, _triage_file(tmp_path, {SEED: entry}), "0.5.14")
    assert night["verdict"] == "fail" and "lacks repro.py" in night["failing"][0]["gate"]


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the release's wheel; WB_NETWORK_TESTS=1"
)
NEWEST = "0.5.23"  # the newest release the shipped triage file was built on


@pytest.mark.network
@requires_network
@pytest.mark.timeout(900)
def test_the_gate_fails_a_newest_release_checkout_that_drops_the_fix(tmp_path: Path) -> None:
    from upstream_checkouts import make_checkout

    between = make_checkout(NEWEST, tmp_path / "between", ("EagleDraftExtendInput", "kv_indptr"))
    clean = make_checkout(NEWEST, tmp_path / "clean")
    sarif = tmp_path / "between.sarif"
    assert (
        workbench_main(["upstream", "lint", "--sglang-src", str(between), "--fail-on", "new", "--sarif", str(sarif)])
        == 1
    )
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    failing = [r for r in results if r["properties"]["gate"]]
    seed = [
        r
        for r in failing
        if r["properties"]["spec_class"] == "EagleDraftExtendInput" and r["properties"]["attr"] == "kv_indptr"
    ]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in seed}
    assert "python/sglang/srt/layers/attention/triton_backend.py" in uris
    assert all(r["properties"]["gate"].startswith("reappeared: fixed in") for r in seed)
    assert any("0.5.14" in r["properties"]["gate"] and "28221" in r["properties"]["gate"] for r in seed)
    assert workbench_main(["upstream", "lint", "--sglang-src", str(clean), "--fail-on", "new"]) == 0
