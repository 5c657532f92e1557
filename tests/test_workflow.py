"""The example nightly workflow passes actionlint and zizmor (both from the dev extras: missing is a
failure, not a skip), and the two tools do reject a broken workflow, so a pass means something."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "ci" / "nightly.example.yml"
BROKEN = """name: broken
on: push
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.head_commit.message }}"
      - run: echo ${{ matrix.nope }}
"""


def tool(name: str) -> str:
    """The tool next to this interpreter (the venv's bin) or on PATH; a failure when neither has it."""
    found = shutil.which(name, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail(f"{name} not found: install the dev extras (pip install -e '.[dev]'), which ship it")
    return found


def lint(name: str, path: Path) -> subprocess.CompletedProcess:
    args = [tool(name), str(path)] if name == "actionlint" else [tool(name), "--offline", "--no-progress", str(path)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", ["actionlint", "zizmor"])
def test_the_example_workflow_passes(name):
    res = lint(name, WORKFLOW)
    assert res.returncode == 0, f"{name} found problems:\n{res.stdout}\n{res.stderr}"


@pytest.mark.parametrize("name", ["actionlint", "zizmor"])
def test_the_linters_reject_a_broken_workflow(name, tmp_path):
    bad = tmp_path / "broken.yml"
    bad.write_text(BROKEN)
    res = lint(name, bad)
    assert res.returncode != 0, f"{name} passed a workflow with an unpinned action and an undefined matrix key"


def _runs(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def _uses(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action + "@")]


def test_the_workflow_caches_keeps_history_and_merges_without_torch():
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    assert doc["permissions"] == {} and all("permissions" in j for j in jobs.values())
    assert jobs["merge"]["if"].replace(" ", "") == "${{!cancelled()}}"
    merge_runs = _runs(jobs["merge"])
    assert "make venv" not in merge_runs and "torch" not in merge_runs.replace("no torch", "")
    assert "--merge" in merge_runs and "GITHUB_STEP_SUMMARY" in merge_runs and "No history" in merge_runs
    for name in ("shard", "upstream", "merge", "guard"):
        keys = [s["with"]["key"] for s in jobs[name]["steps"] if "actions/cache" in s.get("uses", "")]
        assert keys and all("runner.os" in k and "python-version" in k for k in keys), (name, keys)
        assert any("hashFiles('constraints.txt')" in k for k in keys), (name, keys)
    uploads = [s["with"]["name"] for s in _uses(jobs["merge"], "actions/upload-artifact")]
    assert "nightly-history" in uploads


def test_histories_come_from_the_default_branch_only():
    """A run on another branch never feeds main's history: every lookup lists the default branch's runs."""
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    for job, artifact in (("merge", "nightly-history"), ("guard", "guard-history")):
        runs = _runs(jobs[job])
        assert "defaultBranchRef" in runs and '--branch "$branch"' in runs and f"--name {artifact}" in runs, job
        assert artifact in [s["with"]["name"] for s in _uses(jobs[job], "actions/upload-artifact")]
    assert "gh run list" not in _runs(jobs["upstream"]) + _runs(jobs["shard"])


def test_junit_is_published_pages_deploy_and_failures_open_one_issue():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    for job, files in (("merge", "nightly/junit.xml"), ("upstream", "upstream-nightly/junit.xml")):
        [step] = _uses(jobs[job], "EnricoMi/publish-unit-test-result-action")
        assert files in step["with"]["files"] and jobs[job]["permissions"]["checks"] == "write", job
    assert _uses(jobs["merge"], "actions/upload-pages-artifact")[0]["with"]["path"] == "nightly"
    assert "nightly/index.html" in _runs(jobs["merge"])
    pages = jobs["pages"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"} and _uses(pages, "actions/deploy-pages")
    assert "default_branch" in pages["if"] and pages["environment"]["name"] == "github-pages"
    notify = jobs["notify"]
    assert set(notify["needs"]) == {"shard", "merge", "upstream", "guard"} and notify["permissions"] == {
        "issues": "write"
    }
    script = _runs(notify)
    assert "--label nightly-failure --state open" in script  # the one open issue, found again each night
    assert "gh issue comment" in script and "gh issue create" in script and "gh issue close" in script


def test_the_shard_count_is_written_once_and_shards_install_only_the_package():
    text = WORKFLOW.read_text()
    jobs = yaml.safe_load(text)["jobs"]
    shards = jobs["shard"]["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1))
    assert "strategy.job-total" in text and f"/{len(shards)}" not in text
    assert "make venv EXTRAS=" in _runs(jobs["shard"]) and "make venv EXTRAS=" in _runs(jobs["guard"])
    assert "pytest" in _runs(jobs["upstream"]) and "make venv\n" in _runs(jobs["upstream"]) + "\n"


def test_the_guard_lane_is_its_own_job():
    guard = yaml.safe_load(WORKFLOW.read_text())["jobs"]["guard"]
    assert "workbench upstream nightly --out guard --history guard-history/upstream_lane.jsonl" in _runs(guard)
    assert "upstream nightly" not in _runs(yaml.safe_load(WORKFLOW.read_text())["jobs"]["upstream"])


def test_the_report_gets_the_guard_lanes_night_and_history():
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    merge = jobs["merge"]
    assert "guard" in merge["needs"] and "shard" in merge["needs"]
    got = {s["with"]["name"]: s for s in _uses(merge, "actions/download-artifact") if "name" in s.get("with", {})}
    # the artifacts the guard job uploads, each optional (a lane that wrote nothing is said so in the report)
    uploaded = {s["with"]["name"]: s["with"]["path"] for s in _uses(jobs["guard"], "actions/upload-artifact")}
    assert set(got) == {"guard", "guard-history"} == set(uploaded)
    assert all(s.get("continue-on-error") is True for s in got.values())
    runs = " ".join(_runs(merge).split())
    lane, history = got["guard"]["with"]["path"], got["guard-history"]["with"]["path"]
    assert f"--lane {lane} --lane-history {history}/upstream_lane.jsonl" in runs
    assert "--history guard-history/upstream_lane.jsonl" in _runs(jobs["guard"])  # the file the report reads
