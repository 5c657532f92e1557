"""The nightly runner: wrong expectations fail naming the cell, hung and killed notebooks are
reported while the others keep their results, shards merge (without torch), the report opens with
the verdict and crash matrix and links HTML pages, JUnit and Markdown are written, the lossless
check never skips, and the history survives two runners."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from workbench_ci import nightly
from workbench_ci.execute import execution_result
from workbench_ci.expect import check_lossless
from workbench_ci.history import History
from workbench_ci.results import CellResult

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def _matrix(tmp_path: Path, cells: list, cell_s: float = 60, notebook_s: float = 120, **extra) -> Path:
    doc = {"timeouts": {"cell_s": cell_s, "notebook_s": notebook_s, "start_s": 60}, "cells": cells, **extra}
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(doc))
    return path


def _ok(name: str, tag: str) -> dict:
    return {"name": name, "notebook": str(FIXTURES / "fixture_ok.ipynb"), "parameters": {"tag": tag}, "expect": "ok"}


def _cells(out: Path) -> dict:
    return {c["cell"]: c for c in json.loads((out / "summary.json").read_text())["cells"]}


def test_wrong_expectation_exits_nonzero_naming_cell_and_reason(tmp_path, capsys):
    cell = {
        "name": "claims-a-crash",
        "notebook": "notebooks/01_reproduce_crash.ipynb",
        "parameters": {
            "backend": "torch_native",
            "revision": "pre-24860",
            "dp": 1,
            "num_prompts": 1,
            "max_new_tokens": 4,
            "steps": 3,
            "topk": 2,
            "draft_tokens": 4,
            "compare_backends": [],
        },
        "expect": {"status": "crashed", "exception_type": "AttributeError", "rank": 1},
    }
    out = tmp_path / "out"
    argv = ["--matrix", str(_matrix(tmp_path, [cell], cell_s=240)), "--out", str(out)]
    if os.environ.get("WB_MODEL_DIR"):
        argv += ["--model-dir", os.environ["WB_MODEL_DIR"]]
    assert nightly.main(argv) == 1
    err = capsys.readouterr().err
    assert "UNEXPECTED claims-a-crash" in err
    assert "expected crashed [exception_type='AttributeError', rank=1], got status 'ok'" in err
    assert "ExpectationError" in err  # the notebook's own gate failed too (expect='crashed')
    assert _cells(out)["claims-a-crash"]["verdict"] == "unexpected"
    assert "claims-a-crash" in (out / "report.html").read_text()


def test_hung_and_killed_notebooks_are_reported_and_others_keep_results(tmp_path, capsys):
    cells = [
        _ok("fine-a", "a"),
        {"name": "hangs", "notebook": str(FIXTURES / "fixture_hang.ipynb"), "parameters": {}, "expect": "ok"},
        {"name": "killed", "notebook": str(FIXTURES / "fixture_kill.ipynb"), "parameters": {}, "expect": "ok"},
        _ok("fine-b", "b"),
    ]
    out = tmp_path / "out"
    t0 = time.perf_counter()
    assert nightly.main(["--matrix", str(_matrix(tmp_path, cells, cell_s=6)), "--out", str(out), "--jobs", "2"]) == 1
    assert time.perf_counter() - t0 < 100, "the hung notebook was not stopped by the cell timeout"
    err = capsys.readouterr().err
    got = _cells(out)
    assert got["hangs"]["execution"] == "timeout" and "UNEXPECTED hangs: notebook timeout" in err
    assert got["killed"]["execution"] == "killed" and "UNEXPECTED killed: notebook killed" in err
    assert "DeadKernelError" in " ".join(got["killed"]["reasons"])
    for name in ("fine-a", "fine-b"):
        assert got[name]["verdict"] == "expected" and got[name]["primary"] == "ok"
        assert (out / got[name]["paths"]["record"]).is_file() and (out / got[name]["paths"]["notebook"]).is_file()
    assert (out / got["hangs"]["paths"]["notebook"]).is_file(), "the partial executed notebook is kept"


def test_shards_merge_into_one_report(tmp_path, capsys):
    cells = [_ok(f"fine-{i}", str(i)) for i in range(3)]
    matrix = _matrix(tmp_path, cells)
    for i in (1, 2):
        assert nightly.main(["--matrix", str(matrix), "--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/2"]) == 0
    assert sorted(c["name"] for c in json.loads((tmp_path / "s1" / "results.json").read_text())["cells"]) == [
        "fine-0",
        "fine-2",
    ]
    out = tmp_path / "merged"
    assert nightly.main(["--merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "pass" and summary["shards"] == ["1/2", "2/2"] and summary["cells_total"] == 3
    assert all((out / c["paths"]["notebook"]).is_file() for c in summary["cells"])
    assert "report:" in capsys.readouterr().out
    # the merge alone needs no torch (a CI merge job does not install it)
    no_torch = (
        "import sys; sys.modules['torch'] = None; from workbench_ci import nightly; "
        f"sys.exit(nightly.main(['--merge', {str(tmp_path / 's1')!r}, {str(tmp_path / 's2')!r}, "
        f"'--out', {str(tmp_path / 'merged-no-torch')!r}]))"
    )
    merged = subprocess.run([sys.executable, "-c", no_torch], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stderr[-2000:]
    # a merge that misses a shard fails and says which
    assert nightly.main(["--merge", str(tmp_path / "s1"), "--out", str(tmp_path / "half")]) == 1
    assert "shard 2/2 reported no results" in capsys.readouterr().err
    # the upstream guard's lane (tests/ci/test_nightly_lane.py): absent, the report says so in one line;
    # a current night that did not pass, from the lane's own folder, is shown and fails this night too
    from datetime import UTC, datetime

    from workbench.upstream.lane import LANE_HTML, LANE_JSON

    assert "Upstream guard lane: no lane result" in (out / "report.html").read_text()
    assert "Upstream guard lane: no lane result" in (out / "summary.md").read_text()
    guard = tmp_path / "guard"
    guard.mkdir()
    now = datetime.now(UTC).isoformat(timespec="seconds")
    night = {"verdict": "error", "release": "0.5.23", "problems": ["EnvBuildError: torch: offline"], "failing": []}
    night |= {"findings": [], "not_filed": [], "finished_at": now, "workbench_commit": "abc"}
    (guard / LANE_JSON).write_text(json.dumps(night))
    (guard / LANE_HTML).write_text("<section>lane page</section>")
    lane_out = tmp_path / "with-lane"
    merge = ["--merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(lane_out), "--lane", str(guard)]
    assert nightly.main(merge) == 1
    assert "upstream lane on sglang 0.5.23: error: EnvBuildError" in capsys.readouterr().err
    report = (lane_out / "report.html").read_text()
    assert "Upstream guard lane: sglang 0.5.23 ERROR" in report and "href='lane/upstream_lane.html'" in report
    assert (lane_out / "lane" / LANE_HTML).is_file()
    assert json.loads((lane_out / "summary.json").read_text())["lane"]["state"] == "current"


def test_report_opens_with_verdict_and_matrix_links_pages_and_writes_junit_and_markdown(tmp_path, capsys):
    no_ref = {**_ok("no-greedy-reference", "a"), "parameters": {"tag": "a", "greedy_sha": ""}}
    out = tmp_path / "out"
    assert nightly.main(["--matrix", str(_matrix(tmp_path, [no_ref])), "--out", str(out)]) == 1
    assert "has no plain greedy run" in capsys.readouterr().err
    page = (out / "report.html").read_text()
    order = [page.index(mark) for mark in ("<b>FAIL</b>: 1 of 1", "Crash matrix", "<h2>Results")]
    assert order == sorted(order), "the verdict and the crash matrix come first"
    cell = _cells(out)["no-greedy-reference"]
    for key in ("html", "notebook"):
        assert (out / cell["paths"][key]).is_file() and f"href='{cell['paths'][key]}'" in page
    assert (out / cell["paths"]["html"]).read_text().lstrip().lower().startswith("<!doctype html")
    suite = ET.parse(out / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("1", "1")
    assert "has no plain greedy run" in suite.find("testcase/failure").get("message")
    md = (out / "summary.md").read_text()
    assert md.startswith("## Nightly FAILED: 0/1") and "**UNEXPECTED**" in md and "none before this night" in md


def _run_cell(name: str, mode: str, sha: str) -> CellResult:
    cfg = {
        "mode": mode,
        "prompts": ["p"],
        "max_new_tokens": 4,
        "seed": 0,
        "model_dir": None,
        "steps": 3,
        "topk": 2,
        "draft_tokens": 4,
    }
    runs = {"run": {"status": "ok", "outputs_sha256": sha, "config": cfg}}
    return CellResult(name, "nb", {}, {}, {}, execution_result("ok"), {"runs": runs})


def test_lossless_compares_every_eagle_run_with_greedy_and_never_skips():
    eagle, greedy = _run_cell("e", "eagle", "a" * 64), _run_cell("g", "greedy", "a" * 64)
    assert check_lossless([eagle, greedy]) == {}
    assert (
        "differs from plain greedy's bbbbbbbbbbbb"
        in check_lossless([eagle, _run_cell("g", "greedy", "b" * 64)])["e"][0]
    )
    assert "has no plain greedy run" in check_lossless([eagle])["e"][0]


def test_accept_length_drop_against_previous_night(tmp_path, capsys):
    matrix = _matrix(tmp_path, [_ok("fine", "a")], tolerances={"accept_length_drop": 0.1})
    hist = tmp_path / "h.sqlite"
    base = ["--matrix", str(matrix), "--history", str(hist)]
    assert nightly.main(base + ["--out", str(tmp_path / "n1"), "--night", "n1"]) == 0
    lower = json.loads(matrix.read_text())
    lower["cells"][0]["parameters"]["accept_length"] = 2.2
    matrix.write_text(json.dumps(lower))
    assert nightly.main(base + ["--out", str(tmp_path / "n2"), "--night", "n2"]) == 1
    assert (
        "accept length: run 'run' mean 2.200 is 0.300 below night n1's 2.500 (tolerance 0.1; same parameters"
        in capsys.readouterr().err
    )
    # other parameters (or models): another experiment, a new baseline, not a drop
    lower["cells"][0]["parameters"]["max_new_tokens"] = 4
    matrix.write_text(json.dumps(lower))
    assert nightly.main(base + ["--out", str(tmp_path / "n3"), "--night", "n3"]) == 0
    with History(hist) as h:
        rows = [r for r in h.trend_rows() if r["role"] == "run"]
    assert [r["night"] for r in rows] == ["n1", "n2", "n3"]
    assert rows[0]["params_hash"] == rows[1]["params_hash"] != rows[2]["params_hash"]
    assert json.loads(rows[2]["params"])["max_new_tokens"] == 4 and "models_sha256" in json.loads(rows[2]["params"])


APPEND = """
import json, sys, time
from workbench_ci.execute import execution_result
from workbench_ci.history import History
from workbench_ci.results import CellResult
path, tag, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
run = json.loads(sys.argv[4])
cells = [CellResult(f"cell{i}", "nb", {}, {}, {}, execution_result("ok"), {"runs": {"run": run}}) for i in range(40)]
while time.time() < start:
    pass
for night in range(15):
    with History(path) as h:
        h.append_night(f"{tag}-{night}", "now", "pass", cells, {"runner": tag})
"""


def test_history_survives_two_runners_at_once(tmp_path):
    db = tmp_path / "history.sqlite"
    rec = {
        "status": "ok",
        "config": {"backend": "fa3", "mode": "eagle", "kernel_stand_in": True},
        "metrics": {"accept_length_mean": 2.0, "latency_s": {"verify": [0.01]}},
        "outputs_sha256": "x",
    }
    start = time.time() + 3.0  # both interpreters are up by then
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", APPEND, str(db), tag, str(start), json.dumps(rec)], env=env)
        for tag in ("A", "B")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with History(db) as h:
        assert h.integrity() == "ok"
        nights = h.nights()
        assert sorted(n["label"] for n in nights) == sorted(f"{t}-{i}" for t in "AB" for i in range(15))
        assert {n["verdict"] for n in nights} == {"pass"}
        assert len(h.trend_rows(last_nights=100)) == 30 * 40
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT COUNT(*) FROM runs GROUP BY night_id HAVING COUNT(*) != 40").fetchall() == []


@pytest.mark.parametrize("shard", ["0/2", "3/2", "x"])
def test_bad_shard_is_a_usage_error(tmp_path, shard, capsys):
    assert (
        nightly.main(
            ["--matrix", str(_matrix(tmp_path, [_ok("fine", "a")])), "--out", str(tmp_path / "o"), "--shard", shard]
        )
        == 2
    )
    assert "shard" in capsys.readouterr().err


def test_notebook_past_the_hard_limit_is_killed(tmp_path, capsys):
    cell = {"name": "hangs", "notebook": str(FIXTURES / "fixture_hang.ipynb"), "parameters": {}, "expect": "ok"}
    matrix = _matrix(tmp_path, [cell], cell_s=300, notebook_s=5)
    t0 = time.perf_counter()
    assert nightly.main(["--matrix", str(matrix), "--out", str(tmp_path / "o")]) == 1
    assert time.perf_counter() - t0 < 60
    assert "NotebookTimeout" in capsys.readouterr().err


def test_a_missing_notebook_or_unknown_parameter_is_a_usage_error_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("an earlier night's report")  # nothing is removed either
    cells = [
        _ok("fine", "a"),
        {"name": "gone", "notebook": "notebooks/no_such.ipynb", "parameters": {}, "expect": "ok"},
        {**_ok("typo", "b"), "parameters": {"tga": "b"}},
    ]
    assert nightly.main(["--matrix", str(_matrix(tmp_path, cells)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cell 'gone': notebook notebooks/no_such.ipynb not found" in err
    assert "cell 'typo': parameter(s) ['tga'] are not in fixture_ok.ipynb's parameters cell" in err
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]


def test_report_reads_the_comparison_from_the_cell_record_the_runner_writes(tmp_path):
    """The report's comparison headline and section come from the key ``workbench_ci.cells`` writes
    (``notebook_record``): a cell in that shape gives its headline and an HTML section naming it."""
    from workbench.views.comparison import headlines

    doc = {"headline": "Found EAGLE3/greedy: torch_native dp1 1.74 [1.56, 1.80]x faster."}
    cell = {"name": "03_backend_comparison/dp1", "notebook_record": {"compare": doc}}
    assert headlines([cell]) == [f"03_backend_comparison/dp1: {doc['headline']}"]
    assert headlines([{"name": "x", "bundle": {"compare": doc}}]) == []
