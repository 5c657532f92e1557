"""The guard lane in the nightly report, from a synthetic lane night: present (pass, fail), absent,
an earlier night's (labelled with its date), only in the history; a current failing lane fails the night."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from workbench.upstream import lane as wb_lane
from workbench_ci import upstream_lane as ci_lane
from workbench_ci.upstream_lane import CURRENT_H, lane_line, lane_problems, lane_section, latest_lane

NOW = datetime(2026, 12, 4, 3, 0, tzinfo=UTC)
FAILING_KEY = "triton|IDLE|NewInput|kv_indptr|TritonAttnBackend.init_forward_metadata"
LIVE_KEY = "triton|IDLE|EagleVerifyInput|kv_indptr|TritonAttnBackend.init_forward_metadata"


def _night(verdict: str = "pass", finished: datetime = NOW - timedelta(minutes=40), release: str = "0.5.23") -> dict:
    """A lane night in `workbench upstream nightly`'s shape (upstream_lane.json)."""
    findings = [
        {"key": LIVE_KEY, "verdict": "confirmed"},
        {"key": "wave|IDLE|X|kv_indptr|W.init_forward_metadata", "verdict": "unreachable"},
        {"key": "wave|IDLE|Y|kv_indptr|W.init_forward_metadata", "verdict": "unreachable"},
    ]
    failing = [{"key": FAILING_KEY, "gate": "not in the triage file"}] if verdict == "fail" else []
    if verdict == "fail":
        findings.append({"key": FAILING_KEY, "verdict": "confirmed"})
    return {
        "started_at": (finished - timedelta(seconds=30)).isoformat(timespec="seconds"),
        "finished_at": finished.isoformat(timespec="seconds"),
        "workbench_commit": "0123456789abcdef",
        "release": release,
        "problems": ["EnvBuildError: torch: offline"] if verdict == "error" else [],
        "findings": findings if verdict != "error" else [],
        "failing": failing,
        "not_filed": [{"key": LIVE_KEY, "read": "triton_backend.py:891", "link": "workbench/assets/upstream_repro/x"}],
        "verdict": verdict,
    }


def _write(d: Path, night: dict, page: bool = True) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / ci_lane.LANE_JSON).write_text(json.dumps(night))
    if page:
        (d / ci_lane.LANE_HTML).write_text("<section>the lane's own page</section>")
    return d


def test_file_names_and_history_shape_follow_the_lane() -> None:
    assert (ci_lane.LANE_JSON, ci_lane.LANE_HTML) == (wb_lane.LANE_JSON, wb_lane.LANE_HTML)
    night = _night("fail")
    assert ci_lane._from_night(night) == wb_lane.history_line(night)


def test_a_current_passing_lane_is_shown_with_counts_live_findings_date_commit_and_page(tmp_path: Path) -> None:
    out = tmp_path / "report"
    lane_dir = _write(tmp_path / "guard", _night("pass"))
    got = latest_lane(out, lane_dir, None, NOW)
    assert got["state"] == "current" and got["page"] == "lane/upstream_lane.html"
    assert (out / "lane" / "upstream_lane.html").read_text() == "<section>the lane's own page</section>"
    line = lane_line(got)
    assert "sglang 0.5.23 PASS" in line and "1 confirmed, 2 unreachable" in line
    assert "0 failing the gate, 1 live, not filed upstream" in line
    assert "finished 2026-12-04T02:20:00+00:00, workbench 0123456789ab" in line
    page = lane_section(got)
    assert LIVE_KEY in page and "href='lane/upstream_lane.html'" in page and "banner expected" in page
    assert lane_problems(got) == []


def test_a_current_failing_lane_names_the_new_findings_and_fails_the_night(tmp_path: Path) -> None:
    got = latest_lane(tmp_path / "report", _write(tmp_path / "guard", _night("fail")), None, NOW)
    assert "sglang 0.5.23 FAIL" in lane_line(got) and "1 failing the gate" in lane_line(got)
    page = lane_section(got)
    assert "Failing the gate (--fail-on new)" in page and f"{FAILING_KEY}: not in the triage file" in page
    assert "banner unexpected" in page
    assert lane_problems(got) == [f"upstream lane on sglang 0.5.23: fail: {FAILING_KEY}: not in the triage file"]
    error = latest_lane(tmp_path / "r2", _write(tmp_path / "g2", _night("error")), None, NOW)
    assert lane_problems(error) == ["upstream lane on sglang 0.5.23: error: EnvBuildError: torch: offline"]
    assert "Could not run" in lane_section(error)


def test_no_lane_result_is_one_line_saying_so(tmp_path: Path) -> None:
    got = latest_lane(tmp_path / "report", None, tmp_path / "missing.jsonl", NOW)
    assert got["state"] == "none" and lane_problems(got) == []
    assert lane_line(got).startswith("Upstream guard lane: no lane result: neither ")
    assert str(tmp_path / "report" / "lane" / "upstream_lane.json") in lane_line(got)
    assert lane_section(got).count("<p>") == 1


def test_an_earlier_nights_result_is_labelled_with_its_date_and_does_not_fail_tonight(tmp_path: Path) -> None:
    old = _night("fail", finished=NOW - timedelta(hours=CURRENT_H + 14))
    got = latest_lane(tmp_path / "report", _write(tmp_path / "guard", old), None, NOW)
    assert got["state"] == "earlier"
    assert "an EARLIER night's result (26 h before this report): finished 2026-12-03T01:00:00+00:00" in lane_line(got)
    assert lane_problems(got) == [] and "banner unexpected" in lane_section(got)


def test_the_history_gives_the_result_when_the_night_has_none_and_the_newer_one_wins(tmp_path: Path) -> None:
    history = tmp_path / "guard-history" / "upstream_lane.jsonl"
    wb_lane.append_history(history, _night("pass", finished=NOW - timedelta(days=2), release="0.5.22"))
    wb_lane.append_history(history, _night("pass", finished=NOW - timedelta(hours=1)))
    got = latest_lane(tmp_path / "report", tmp_path / "guard", history, NOW)
    assert got["state"] == "current" and got["night"]["release"] == "0.5.23" and got["page"] is None
    assert "(last of 2 night(s))" in got["source"] and "The lane's own page is not here" in lane_section(got)
    # a lane folder left from an earlier run loses to a newer history line
    stale = _write(tmp_path / "old-guard", _night("fail", finished=NOW - timedelta(days=3)))
    assert latest_lane(tmp_path / "report", stale, history, NOW)["night"]["verdict"] == "pass"
