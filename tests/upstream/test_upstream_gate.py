"""The gate: --fail-on rules against the triage file, exit codes, SARIF, and the lane failing closed."""

from __future__ import annotations

import json
import os
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
from packaging.version import Version
from upstream_fixtures import toy_tree, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.run.serialise import to_dict
from workbench.upstream import gate, lane
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.gate import GateError, judge, load_triage, not_filed, ran_problems
from workbench.upstream.sources.releases import ReleaseError
from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.finding import Finding, FindingRead, Install, ShippedFinding, read_finding, read_findings
from workbench.upstream.static.lint import analyse
from workbench.views.guard_tables import lane_html

SEED = "toy|IDLE|DraftExtendInput|kv_indptr|Backend.init_forward_metadata"
SITE = "speculative/worker.py:Worker.prepare_for_draft_extend"
SEED_T = f"{SEED}|{SITE}"  # the triage key: the finding's key and its install site


def _finding(release: str = "0.5.14", verdict: str | None = None) -> Finding:
    f = analyse(toy_tree(with_field=False))["findings"][0]
    found = read_finding({**f, "release": release, "verdict": verdict, "verdict_reason": f"replayed: {verdict}"})
    assert isinstance(found, Finding)
    return found


def _shipped_form(f: Finding, sites: list[str]) -> ShippedFinding:
    """`f` as the shipped file holds it: installs counted, with their sites."""
    read = {x.name: getattr(f, x.name) for x in fields(FindingRead)}
    return ShippedFinding(**read, verdict=f.verdict, key=f.key, installs=len(sites), install_sites=sites)


def _entry(**kw) -> gate.TriageEntry:
    return gate.TriageEntry(
        **{"verdict": "refuted", "status": "false-positive", "reason": "toy", "decided_by": "test", **kw}
    )


def _triage_file(tmp_path: Path, entries: dict, schema: str = gate.SCHEMA) -> Path:
    path = tmp_path / "triage.json"
    entries = {k: to_dict(e) if isinstance(e, gate.TriageEntry) else e for k, e in entries.items()}
    path.write_text(json.dumps({"schema": schema, "produced_by": {}, "entries": entries}))
    return path


def test_the_triage_key_names_the_install_site() -> None:
    f = _finding()
    assert f.key == SEED and gate.triage_keys(f) == [SEED_T] and gate.read_key(SEED_T) == SEED
    other = Install(file="sglang/srt/managers/s.py", line=3, function="S.run", kind="keyword", mode_from="call")
    two = replace(f, installs=[*f.installs, other])
    assert gate.triage_keys(two) == [f"{SEED}|managers/s.py:S.run", SEED_T]
    shipped = _shipped_form(f, ["managers/s.py:S.run"])  # the shipped, slim form
    assert gate.triage_keys(shipped) == [f"{SEED}|managers/s.py:S.run"]
    # a new way to reach a known read is new; the known one alone passes
    failing = judge([two], {SEED_T: _entry()}, "new", "0.5.14")
    assert failing[0].gate == "new: install site managers/s.py:S.run (a new way to reach a read the triage file knows)"
    assert judge([f], {SEED_T: _entry()}, "new", "0.5.14") == []
    # a fixed read found again through a site the triage file never saw: it came back, and by a new way
    fixed = {SEED_T: _entry(verdict="confirmed", status="accepted", fixed_in="0.5.13", link="https://example.org/pr/1")}
    moved = replace(f, installs=two.installs[1:])
    assert judge([moved], fixed, "new", "0.5.14")[0].gate == (
        "reappeared: fixed in 0.5.13 (https://example.org/pr/1), found again in 0.5.14, through a new install site "
        "managers/s.py:S.run"
    )
    v1 = f"{SEED}|speculative/v1.py:V1.run"  # a site gone earlier than the read's fix: the read's fix is named
    gone = _entry(verdict="confirmed", status="accepted", fixed_in="0.5.12", link="https://example.org/pr/1")
    fixed = {v1: gone, SEED_T: replace(fixed[SEED_T], fixed_in="0.5.14")}  # the earlier site first
    assert judge([replace(moved, release="0.5.15")], fixed, "new", "0.5.15")[0].gate.startswith(
        "reappeared: fixed in 0.5.14"
    )
    still = {**fixed, SEED_T: replace(fixed[SEED_T], fixed_in=None)}  # the read is live through another site
    assert judge([replace(moved, release="0.5.15")], still, "new", "0.5.15")[0].gate.startswith("new: install site")


def test_fail_on_new_covers_each_rule() -> None:
    f = _finding()
    assert judge([f], {}, "new", "0.5.14")[0].gate == f"new: not in the triage file (install site {SITE})"
    assert judge([f], {SEED_T: _entry()}, "new", "0.5.14") == []
    fixed = {SEED_T: _entry(verdict="confirmed", status="accepted", fixed_in="0.5.14", link="https://example.org/pr/1")}
    assert judge([_finding("0.5.13", "confirmed")], fixed, "new", "0.5.14") == []  # before its fix: known
    why = judge([_finding("0.5.14")], fixed, "new", "0.5.14")[0].gate
    assert why.startswith("reappeared: fixed in 0.5.14 (https://example.org/pr/1)")
    assert judge([_finding("0.5.12", "confirmed")], {SEED_T: _entry()}, "new", "0.5.14")[0].gate == (
        "a replay now confirms it; the triage file says refuted"
    )
    accepted = {SEED_T: _entry(verdict="confirmed", status="accepted")}
    why = judge([_finding("0.5.14", "confirmed")], accepted, "new", "0.5.14")[0].gate
    assert why == "confirmed on the newest release, and its triage entry says accepted, not live-filed or live-unfiled"
    assert judge([_finding("0.5.13", "confirmed")], accepted, "new", "0.5.14") == []  # an older release
    fp = {SEED_T: _entry(verdict="confirmed", status="false-positive")}
    assert "says false-positive" in judge([_finding("0.5.13", "confirmed")], fp, "new", "0.5.14")[0].gate
    live = {SEED_T: _entry(verdict="confirmed", status="live-filed", link="https://example.org/issues/2")}
    assert judge([_finding("0.5.14", "confirmed")], live, "new", "0.5.14") == []
    assert len(judge([_finding("0.5.14", "confirmed")], live, "confirmed", "0.5.14")) == 1
    assert judge([_finding("0.5.14", "refuted")], live, "confirmed", "0.5.14") == []
    assert len(judge([_finding("0.5.14", "refuted")], live, "any", "0.5.14")) == 1
    with pytest.raises(GateError, match="'sometimes'"):
        judge([f], {}, "sometimes", None)


def test_unverified_fails_unless_its_entry_says_why() -> None:
    f = _finding("0.5.14", "unverified")
    assert judge([f], {}, "new", "0.5.14")[0].gate.startswith("new: not in the triage file")
    assert "no triage entry says why" in judge([f], {}, "confirmed", "0.5.14")[0].gate
    refuted = {SEED_T: _entry()}  # reviewed when the replay refuted it: not why it is unverified now
    assert judge([f], refuted, "new", "0.5.14")[0].gate == (
        "unverified (replayed: unverified), and its triage entry does not say why (it was reviewed as refuted)"
    )
    assert judge([f], refuted, "confirmed", "0.5.14")[0].gate == (
        f"--fail-on confirmed: unverified (replayed: unverified) and no triage entry says why ({SEED_T})"
    )
    said = {SEED_T: _entry(verdict="unverified", status="accepted", reason="needs a GPU library to decide")}
    assert judge([f], said, "new", "0.5.14") == [] and judge([f], said, "confirmed", "0.5.14") == []


def test_a_traced_raise_is_listed_with_the_live_ones_and_never_passes_silently() -> None:
    f = _finding("0.5.14", "traced: raised")
    assert gate.live_rows([f], {}, "0.5.14")[0]["status"] is None
    assert "new: not in the triage file" in judge([f], {}, "new", "0.5.14")[0].gate
    was = {SEED_T: _entry(verdict="traced: not read")}
    assert judge([f], was, "new", "0.5.14")[0].gate == (
        "the read now raises (traced: raised); the triage file says traced: not read"
    )
    reviewed = {SEED_T: _entry(verdict="traced: raised", status="accepted", reason="a GPU-only backend")}
    assert judge([f], reviewed, "new", "0.5.14") == []
    (row,) = gate.live_rows([f], reviewed, "0.5.14")
    assert (row["key"], row["status"], row["verdict"]) == (SEED_T, "accepted", "traced: raised")
    assert gate.live_lines([row]) == [f"live (traced: raised), accepted: {SEED_T} at {row['read']}: a GPU-only backend"]
    assert gate.by_status([row]) == {"accepted": 1}
    assert gate.live_rows([_finding("0.5.13", "traced: raised")], reviewed, "0.5.14") == []  # not the newest


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"verdict": "maybe"}, "verdict 'maybe'"),
        ({"reason": ""}, "no reason"),
        ({"decided_by": None}, "no decided_by"),
        ({"status": None}, "status None is none of live-filed, live-unfiled, accepted, false-positive"),
        ({"fixed_in": "soon"}, "fixed_in 'soon'"),
        ({"fixed_in": 14}, "TriageEntry.fixed_in: 14 fits none of"),
        ({"link": "github.com/x"}, "not an https address"),
        ({"status": "live-filed", "link": "workbench/assets/r"}, "live-filed needs an https link"),
        ({"status": "live-unfiled", "link": "https://example.org/1"}, "live-unfiled needs its reproducer folder"),
        ({"status": "live-unfiled", "link": "/abs/r"}, "inside it"),
        ({"status": "live-unfiled", "link": "../r"}, "inside it"),
    ],
)
def test_bad_triage_entries_are_refused(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(GateError, match=re.escape(message)):
        load_triage(_triage_file(tmp_path, {SEED_T: _entry(**entry)}))


def test_bad_triage_files_are_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="backend\\|mode"):
        load_triage(_triage_file(tmp_path, {SEED: _entry()}))  # no install site
    with pytest.raises(GateError, match="is list, not an object"):
        load_triage(_triage_file(tmp_path, {SEED_T: []}))
    with pytest.raises(GateError, match=re.escape("TriageEntry: unknown key(s) ['colour']")):
        load_triage(_triage_file(tmp_path, {SEED_T: {**to_dict(_entry()), "colour": "red"}}))
    with pytest.raises(GateError, match="workbench upstream triage --migrate"):
        load_triage(_triage_file(tmp_path, {SEED: _entry()}, schema="upstream-triage/2"))


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
    entry = _entry(verdict="confirmed", status="live-unfiled")
    cases = {
        _reproducer(tmp_path, "ok", SEED): None,
        "workbench/assets/upstream_repro/absent": "does not exist",
        _reproducer(tmp_path, "no-script", SEED, ("fix.diff", "result.json")): "lacks repro.py",
        _reproducer(tmp_path, "other", "toy|IDLE|Other|kv_indptr|f"): "not of this finding",
    }
    for link, why in cases.items():
        triage = {SEED_T: replace(entry, link=link)}
        failing = judge(found, triage, "new", "0.5.14")
        if why is None:
            assert failing == [] and not_filed(found, triage, "0.5.14")[0]["link"] == link
            assert gate.not_filed_lines(not_filed(found, triage, "0.5.14"))[0].startswith("live, not filed upstream:")
        else:
            assert len(failing) == 1 and why in failing[0].gate, (link, failing)
            assert not_filed(found, triage, "0.5.14") == []
    ok = {SEED_T: replace(entry, link="workbench/assets/upstream_repro/ok")}
    assert not_filed(found, ok, "0.5.15") == []  # not the newest release: nothing to say
    assert load_triage(_triage_file(tmp_path, ok))[SEED_T].status == "live-unfiled"


SHIPPED_FINDINGS = gate.ROOT / "workbench" / "assets" / "upstream_findings.json"


def _shipped() -> tuple[dict[str, gate.TriageEntry], list, str]:
    findings = read_findings(json.loads(SHIPPED_FINDINGS.read_text())["findings"], "shipped")
    newest = max((f.release for f in findings), key=Version)
    return load_triage(), findings, newest


def test_the_shipped_triage_has_no_stale_entry_and_an_entry_for_every_confirmed_live_finding() -> None:
    triage, findings, newest = _shipped()
    assert gate.stale_entries(triage, findings) == []
    assert gate.unentried_live(triage, findings, newest) == []
    assert judge([f for f in findings if f.release == newest], triage, "new", newest) == []
    # the checks can fail: an entry no finding has, a confirmed live finding without its entry
    ghost = {**triage, f"{SEED}|{SITE}": _entry()}
    assert gate.stale_entries(ghost, findings) == [SEED_T]
    live = next(f for f in findings if f.release == newest and f.verdict == "confirmed")
    gone = {k: e for k, e in triage.items() if k != gate.triage_keys(live)[0]}
    assert gate.unentried_live(gone, findings, newest) == [gate.triage_keys(live)[0]]


def test_shipped_entries_were_reviewed_and_the_unfiled_hold_their_reproducers() -> None:
    triage, findings, newest = _shipped()
    assert all(e.status in gate.STATUSES and e.decided_by and e.reason for e in triage.values())
    on_newest = {k for f in findings if f.release == newest for k in gate.triage_keys(f)}
    # 0.5.23's entries were each read by a named review, never decided by verdict alone
    reviews = {"reviewed by guard-gate session, 2026-12-05", "reviewed by lint-family session, 2026-12-05"}
    assert {triage[k].decided_by for k in on_newest} <= reviews
    unfiled = {k: e for k, e in triage.items() if e.status == "live-unfiled"}
    assert {k.split("|")[2] for k in unfiled} >= {
        "EagleVerifyInput",
        "FrozenKVMTPVerifyInput",
        "PPSpecRelayInput",
        "DFlashDraftInputV2",
        "DFlashVerifyInput",  # installed as `self` by DFlashVerifyInput.prepare_for_verify
    }
    for key, e in unfiled.items():
        assert e.verdict == "confirmed" and gate.reproducer_problem(e.link, gate.read_key(key)) is None, key
        result = json.loads((gate.ROOT / e.link / "result.json").read_text())
        assert result["reproduced"] and result["fixed"], key


def test_shipped_triage_file_loads_and_carries_the_seed_fix() -> None:
    shipped = load_triage()
    seed = [e for k, e in shipped.items() if k.startswith("triton|IDLE|EagleDraftExtendInput|kv_indptr|Triton")]
    assert seed and all(e.verdict == "confirmed" and "28221" in e.link for e in seed)
    assert max(e.fixed_in for e in seed) == "0.5.14"  # PR #28221; V1's install sites were gone in 0.5.13


def test_propose_carries_reviewed_entries_and_leaves_the_rest_to_review() -> None:
    old = _finding("0.5.12", "confirmed")
    reviewed = {SEED_T: _entry(verdict="confirmed", status="accepted", link="https://example.org/pr/1", note="seed")}
    doc = gate.propose_triage([old], ["sglang 0.5.12", "sglang 0.5.13"], reviewed, "cmd", "abc", "now")
    entry = doc["entries"][SEED_T]
    assert (entry["releases"], entry["fixed_in"], entry["status"], entry["link"], entry["note"]) == (
        ["0.5.12"],
        "0.5.13",
        "accepted",
        "https://example.org/pr/1",
        "seed",
    )
    assert doc["produced_by"]["candidate"] is True and doc["dropped"] == {}
    changed = gate.propose_triage([_finding("0.5.13", "refuted")], ["0.5.13"], reviewed, "cmd", "abc", "now")
    assert (
        changed["entries"][SEED_T]["status"] is None
        and "changed from confirmed to refuted" in (changed["entries"][SEED_T]["review"])
    )
    fresh = gate.propose_triage([old], ["0.5.12"], {"x|y|z|a|f|s.py:g": _entry()}, "cmd", None, "now")
    assert fresh["entries"][SEED_T]["review"].startswith("new") and list(fresh["dropped"]) == ["x|y|z|a|f|s.py:g"]


def test_migrate_converts_old_keys_once(tmp_path: Path) -> None:
    f = _finding("0.5.14", "confirmed")
    old = {
        "schema": "upstream-triage/2",
        "entries": {
            SEED: {"verdict": "confirmed", "reason": "r", "link": "https://example.org/1", "live": True},
            "gone|IDLE|A|b|f": {"verdict": "refuted", "reason": "r", "link": None},
        },
    }
    doc = gate.migrate_triage(old, [f], "cmd", "abc", "now")
    assert list(doc["entries"]) == [SEED_T] and doc["entries"][SEED_T]["status"] == "live-filed"
    assert list(doc["dropped"]) == ["gone|IDLE|A|b|f"]
    old["entries"][SEED]["live"] = False
    assert gate.migrate_triage(old, [f], "cmd", "abc", "now")["entries"][SEED_T]["status"] is None
    with pytest.raises(GateError, match="expected 'upstream-triage/2'"):
        gate.migrate_triage({"schema": gate.SCHEMA}, [f], "cmd", "abc", "now")
    # a site only an older release had keeps that release's verdict and is fixed after it
    older = _shipped_form(_finding("0.5.13", "confirmed"), ["managers/s.py:S.run"])
    both = [_finding("0.5.13", "refuted"), replace(f, verdict="refuted"), older]  # releases seen more than once
    doc = gate.migrate_triage(old, both, "cmd", "abc", "now")
    site = doc["entries"][f"{SEED}|managers/s.py:S.run"]
    assert (site["verdict"], site["releases"], site["fixed_in"]) == ("confirmed", ["0.5.13"], "0.5.14")
    assert (doc["entries"][SEED_T]["verdict"], doc["entries"][SEED_T]["fixed_in"]) == ("refuted", None)


def test_the_triage_command_never_writes_the_shipped_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    findings = tmp_path / "f.json"
    findings.write_text(
        json.dumps({"sources": ["sglang 0.5.14"], "findings": [to_dict(_finding("0.5.14", "refuted"))]})
    )
    base = ["upstream", "--cache-dir", str(write_fake_cache(tmp_path, {})), "triage"]
    assert workbench_main([*base, "--propose", str(gate.TRIAGE_FILE), "--findings", str(findings)]) == 2
    assert "the run it judges never writes it" in capsys.readouterr().err
    out = tmp_path / "candidate.json"
    argv = [*base, "--propose", str(out), "--findings", str(findings), "--triage", str(_triage_file(tmp_path, {}))]
    assert workbench_main(argv) == 0
    assert json.loads(out.read_text())["entries"][SEED_T]["status"] is None
    with pytest.raises(GateError, match="not reviewed"):
        load_triage(out)  # a candidate is not a triage file until reviewed
    assert workbench_main([*base, "--propose", str(out)]) == 2  # nothing to propose from


def test_a_check_that_read_nothing_is_a_problem() -> None:
    empty = {"source": "x", "lint": {"backend_classes": 0, "spec_inputs": {}, "installs": [], "forward_modes": []}}
    problems = ran_problems({"results": [{**empty, "findings": []}]}, replay=False)
    assert any("read no attention backend" in p for p in problems) and len(problems) == 4
    assert ran_problems({"results": []}, replay=False) == ["no source was linted"]
    ok = {"backend_classes": 1, "spec_inputs": {"A": 1}, "installs": [1], "forward_modes": ["IDLE"]}
    replayed = {"source": "x", "lint": ok, "findings": [_finding(verdict=None)], "replay": {"status": "error"}}
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
    known = _triage_file(tmp_path, {SEED_T: _entry()})
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


def _fake_check(findings: list[Finding], replay_status: str = "ok", e2e_status: str = "ok"):
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
    triage = _triage_file(tmp_path, {SEED_T: _entry()})
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
    entry = _entry(verdict="confirmed", status="live-unfiled", link=_reproducer(tmp_path, "seed", SEED))
    monkeypatch.setattr(guard, "check", _fake_check([_finding("0.5.14", "confirmed")]))
    night = lane.run_lane(ctx, tmp_path / "n1", tmp_path / "h.jsonl", _triage_file(tmp_path, {SEED_T: entry}), "0.5.14")
    assert night["verdict"] == "pass" and [r["key"] for r in night["not_filed"]] == [SEED]
    assert "live, not filed upstream: " + SEED in lane.format_text(night)
    assert "Live, not filed upstream" in lane_html(night, lane.read_history(tmp_path / "h.jsonl"))
    assert lane.read_history(tmp_path / "h.jsonl")[0]["not_filed"] == [SEED]
    assert lane.read_history(tmp_path / "h.jsonl")[0]["live"] == {"live-unfiled": 1}
    assert f"live (confirmed), live-unfiled: {SEED_T}" in lane.format_text(night)
    assert f"live (confirmed), live-unfiled: {SEED_T}" in lane_html(night, [])
    (tmp_path / entry.link / "repro.py").unlink()  # the reproducer gone: the same night fails
    night = lane.run_lane(ctx, tmp_path / "n2", None, _triage_file(tmp_path, {SEED_T: entry}), "0.5.14")
    assert night["verdict"] == "fail" and "lacks repro.py" in night["failing"][0]["gate"]


def test_a_covered_file_that_does_not_parse_or_read_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cache = write_fake_cache(tmp_path, {})
    tree = toy_tree(with_field=True)
    broken = "sglang/srt/layers/attention/broken_backend.py"
    bad = tree.with_changes({broken: "class Broken(:\n"}).write(tmp_path / "unparsable")
    argv = ["upstream", "--cache-dir", str(cache), "lint", "--sglang-src", str(bad)]
    assert workbench_main(argv) == 2  # without --fail-on too: the lint cannot vouch for the file
    out = capsys.readouterr().out
    assert f"{broken} cannot be read or parsed (SyntaxError: invalid syntax (broken_backend.py, line 1))" in out
    assert workbench_main([*argv, "--fail-on", "new", "--triage", str(_triage_file(tmp_path, {}))]) == 2
    result = analyse(memory_tree({**dict(tree.files), broken: "def f(:\n"}))
    assert [u["file"] for u in result["unparsed"]] == [broken]
    latin = toy_tree(with_field=True).write(tmp_path / "latin")
    (latin / "python" / "sglang/srt/speculative/stray.py").write_bytes(b"x = '\xe9'\n")  # not UTF-8
    capsys.readouterr()
    assert workbench_main(["upstream", "--cache-dir", str(cache), "lint", "--sglang-src", str(latin)]) == 2
    assert "sglang/srt/speculative/stray.py: cannot be read as UTF-8" in capsys.readouterr().err


def test_every_exception_is_exit_2_with_the_night_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from workbench.upstream import guard

    cache = write_fake_cache(tmp_path, {})
    ctx = UpstreamContext(cache_dir=cache, log=quiet)
    triage = _triage_file(tmp_path, {SEED_T: _entry()})
    history = tmp_path / "h.jsonl"

    def broken(*a, **k):
        raise KeyError("read_function")  # none of the errors the lane expects

    monkeypatch.setattr(guard, "check", broken)
    night = lane.run_lane(ctx, tmp_path / "n1", history, triage, "0.5.14")
    assert night["verdict"] == "error" and night["problems"][0].startswith("KeyError: 'read_function' (at ")
    assert json.loads((tmp_path / "n1" / lane.LANE_JSON).read_text())["verdict"] == "error"
    assert lane.read_history(history)[-1]["verdict"] == "error"
    argv = ["upstream", "--cache-dir", str(cache), "nightly", "--sglang", "0.5.14", "--triage", str(triage)]
    assert workbench_main([*argv, "--out", str(tmp_path / "n2"), "--history", str(history)]) == 2
    assert [n["verdict"] for n in lane.read_history(history)] == ["error", "error"]
    assert (tmp_path / "n2" / lane.LANE_HTML).exists()
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text("not json\n")
    monkeypatch.setattr(guard, "check", _fake_check([_finding("0.5.14", "refuted")]))
    assert workbench_main([*argv, "--out", str(tmp_path / "n3"), "--history", str(corrupt)]) == 2
    night = json.loads((tmp_path / "n3" / lane.LANE_JSON).read_text())
    assert night["verdict"] == "error" and f"history {corrupt} line 1 is not JSON" in night["problems"][0]
    assert json.loads(corrupt.read_text().splitlines()[-1])["verdict"] == "error"  # the line is still written
    lint = ["upstream", "--cache-dir", str(cache), "lint", "--sglang-src", str(_checkout(tmp_path, False))]
    monkeypatch.setattr("workbench.upstream.guard.check", broken)
    capsys.readouterr()
    assert workbench_main(lint) == 2
    assert "error: could not run: KeyError: 'read_function'" in capsys.readouterr().err


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
