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


def test_the_workflow_caches_keeps_history_and_merges_without_torch():
    text = WORKFLOW.read_text()
    doc = yaml.safe_load(text)
    jobs = doc["jobs"]
    assert doc["permissions"] == {} and all("permissions" in j for j in jobs.values())
    assert jobs["merge"]["if"].replace(" ", "") == "${{!cancelled()}}"
    merge_runs = " ".join(s.get("run", "") for s in jobs["merge"]["steps"])
    assert "make venv" not in merge_runs and "torch" not in merge_runs.replace("no torch", "")
    assert "--merge" in merge_runs and "GITHUB_STEP_SUMMARY" in merge_runs and "No history" in merge_runs
    for name in ("shard", "upstream", "merge"):
        keys = [s["with"]["key"] for s in jobs[name]["steps"] if "actions/cache@" in s.get("uses", "")]
        assert keys and all("runner.os" in k and "python-version" in k for k in keys), (name, keys)
        assert any("hashFiles('constraints.txt')" in k for k in keys), (name, keys)
    uploads = [s["with"]["name"] for s in jobs["merge"]["steps"] if "upload-artifact@" in s.get("uses", "")]
    assert "nightly-history" in uploads
