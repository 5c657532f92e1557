"""The installed workflows (.github/workflows) pass actionlint (with shellcheck on every run step) and
zizmor, all three from the dev extras (a missing tool, or one that read no file, is a failure, never a
skip); the tools reject a broken workflow, so a pass means something; and the workflows keep what the
nightly and the pull-request checks promise (docs/guide.md §3 "CI"). tests/ci/test_workflow_jobs.py runs
each job's Python entry points."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
NIGHTLY, PULL_REQUEST = WORKFLOWS / "nightly.yml", WORKFLOWS / "pull-request.yml"
DEPENDABOT = ROOT / ".github" / "dependabot.yml"
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
UNQUOTED = """name: unquoted
on: push
permissions: {}
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - run: rm -rf $HOME/$DIR
"""
# node24 majors, each pinned by the full SHA of its tag (looked up in the actions' repositories)
CURRENT = {
    "actions/checkout": "v7",
    "actions/setup-python": "v7",
    "actions/cache": "v5",
    "actions/cache/restore": "v5",
    "actions/upload-artifact": "v7",
    "actions/download-artifact": "v8",
    "actions/upload-pages-artifact": "v5",
    "actions/deploy-pages": "v5",
    "github/codeql-action/upload-sarif": "v4",
    "EnricoMi/publish-unit-test-result-action": "v2",
}


def tool(name: str) -> str:
    """The tool next to this interpreter (the venv's bin) or on PATH; a failure when neither has it."""
    found = shutil.which(name, path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail(f"{name} not found: install the dev extras (pip install -e '.[dev]'), which ship it")
    return found


def lint(name: str, *paths: Path) -> subprocess.CompletedProcess:
    """actionlint with the dev extras' shellcheck on every run step, or zizmor offline."""
    if not paths or not all(p.is_file() for p in paths):
        pytest.fail(f"{name}: nothing to read in {[str(p) for p in paths]}")
    if name == "actionlint":
        args = [tool("actionlint"), "-shellcheck", tool("shellcheck"), "-verbose", *map(str, paths)]
    else:
        args = [tool("zizmor"), "--offline", "--no-progress", *map(str, paths)]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _workflows() -> list[Path]:
    found = sorted(WORKFLOWS.glob("*.yml"))
    assert {NIGHTLY, PULL_REQUEST} <= set(found), f"workflows missing from {WORKFLOWS}: {found}"
    return found


def test_every_workflow_passes_actionlint_with_shellcheck():
    paths = _workflows()
    res = lint("actionlint", *paths)
    assert res.returncode == 0, f"actionlint found problems:\n{res.stdout}\n{res.stderr}"
    # -verbose names every file it read: a run that read none would pass silently
    read = set(re.findall(r"Linting (\S+\.yml)", res.stderr))
    assert {str(p.relative_to(ROOT)) for p in paths} <= read, f"actionlint did not read every workflow:\n{res.stderr}"
    assert 'Rule "shellcheck" was disabled' not in res.stderr, res.stderr


def test_every_workflow_and_the_dependabot_config_pass_zizmor():
    paths = [*_workflows(), DEPENDABOT]
    res = lint("zizmor", *paths)
    assert res.returncode == 0, f"zizmor found problems:\n{res.stdout}\n{res.stderr}"
    for p in paths:  # every file audited, so a pass is not an empty run
        assert f"completed {p.relative_to(ROOT)}" in res.stderr or f"completed {p}" in res.stderr, res.stderr


@pytest.mark.parametrize("name", ["actionlint", "zizmor"])
def test_the_linters_reject_a_broken_workflow(name, tmp_path):
    bad = tmp_path / "broken.yml"
    bad.write_text(BROKEN)
    res = lint(name, bad)
    assert res.returncode != 0, f"{name} passed a workflow with an unpinned action and an undefined matrix key"


def test_shellcheck_checks_the_run_steps(tmp_path):
    bad = tmp_path / "unquoted.yml"
    bad.write_text(UNQUOTED)
    res = lint("actionlint", bad)
    assert res.returncode != 0 and "shellcheck reported issue" in res.stdout and "SC2086" in res.stdout, res.stdout


def _jobs(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["jobs"]


def _runs(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def _uses(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action + "@")]


def test_actions_are_current_majors_pinned_by_sha_and_dependabot_bumps_them():
    seen = set()
    for path in _workflows():
        for name, job in _jobs(path).items():
            for step in job["steps"]:
                if "uses" not in step:
                    continue
                action, ref = step["uses"].split("@")
                assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{path.name} {name}: {step['uses']} is not pinned by SHA"
                comment = re.search(re.escape(step["uses"]) + r" # (v\d+)\.", path.read_text())
                assert comment and comment.group(1) == CURRENT[action], (path.name, name, step["uses"], CURRENT[action])
                seen.add(action)
    assert seen == set(CURRENT), set(CURRENT) ^ seen
    updates = yaml.safe_load(DEPENDABOT.read_text())["updates"]
    assert {u["package-ecosystem"] for u in updates} == {"github-actions", "pip"}


def test_the_nightly_caches_keeps_history_and_merges_without_torch():
    doc = yaml.safe_load(NIGHTLY.read_text())
    jobs = doc["jobs"]
    assert doc["permissions"] == {} and all("permissions" in j for j in jobs.values())
    assert jobs["merge"]["if"].replace(" ", "") == "${{!cancelled()}}"
    merge_runs = _runs(jobs["merge"])
    assert "make venv" not in merge_runs and "torch" not in merge_runs
    assert "--merge" in merge_runs and "GITHUB_STEP_SUMMARY" in merge_runs and "No history" in merge_runs
    for name in ("shard", "network", "merge", "guard"):
        keys = [s["with"]["key"] for s in jobs[name]["steps"] if "actions/cache" in s.get("uses", "")]
        assert keys and all("runner.os" in k and "python-version" in k for k in keys), (name, keys)
        assert any("hashFiles('constraints.txt')" in k for k in keys), (name, keys)
    upstream = [
        s for s in jobs["network"]["steps"] if s.get("with", {}).get("path") == "~/.cache/eagle-workbench/upstream"
    ]
    assert upstream and "restore-keys" in upstream[0]["with"], "a constraints.txt change would rebuild every venv"
    assert "nightly-history" in [s["with"]["name"] for s in _uses(jobs["merge"], "actions/upload-artifact")]


def test_histories_come_from_the_default_branch_only():
    """A run on another branch never feeds main's history: every lookup lists the default branch's runs."""
    jobs = _jobs(NIGHTLY)
    for job, artifact in (("merge", "nightly-history"), ("guard", "guard-history")):
        runs = _runs(jobs[job])
        assert "defaultBranchRef" in runs and '--branch "$branch"' in runs and f"--name {artifact}" in runs, job
        assert artifact in [s["with"]["name"] for s in _uses(jobs[job], "actions/upload-artifact")]
    assert "gh run list" not in _runs(jobs["network"]) + _runs(jobs["shard"])


def test_junit_is_published_pages_deploy_and_failures_open_one_issue():
    jobs = _jobs(NIGHTLY)
    [step] = _uses(jobs["merge"], "EnricoMi/publish-unit-test-result-action")
    files = step["with"]["files"].split()
    assert files == ["nightly/junit.xml", "nightly/network/junit.xml", "network/network-*/network-tests.xml"]
    assert jobs["merge"]["permissions"]["checks"] == "write"
    assert _uses(jobs["merge"], "actions/upload-pages-artifact")[0]["with"]["path"] == "nightly"
    assert "nightly/index.html" in _runs(jobs["merge"])
    pages = jobs["pages"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"} and _uses(pages, "actions/deploy-pages")
    assert "default_branch" in pages["if"] and pages["environment"]["name"] == "github-pages"
    notify = jobs["notify"]
    assert set(notify["needs"]) == set(jobs) - {"pages", "notify"} and notify["permissions"] == {"issues": "write"}
    script = _runs(notify)
    assert "--label nightly-failure --state open" in script  # the one open issue, found again each night
    assert "gh issue comment" in script and "gh issue create" in script and "gh issue close" in script


@pytest.mark.parametrize("job", ["shard", "network"], ids=["papermill-shards", "network-shards"])
def test_each_shard_count_is_written_once(job):
    text = NIGHTLY.read_text()
    spec = _jobs(NIGHTLY)[job]
    shards = spec["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and spec["strategy"]["fail-fast"] is False
    assert f"/{len(shards)}" not in text and f"of{len(shards)}" not in text
    shard_envs = [s["env"]["SHARD"] for s in spec["steps"] if "SHARD" in s.get("env", {})]
    assert shard_envs and set(shard_envs) == {"${{ matrix.shard }}/${{ strategy.job-total }}"}
    assert all('--shard "$SHARD"' in s["run"] for s in spec["steps"] if "SHARD" in s.get("env", {}))


def test_the_network_shards_run_every_network_test_and_every_network_cell():
    """.ci/run runs the quick network tests; every network test (the rest too) and every nightly test (the
    long ones make test leaves out) runs in a network shard."""
    network = _jobs(NIGHTLY)["network"]
    steps = {s.get("name", ""): s for s in network["steps"]}
    [tests] = [s for n, s in steps.items() if n.startswith("Network tests")]
    assert tests["env"]["TESTS"] == "tests/" and tests["env"]["WB_NETWORK_TESTS"] == "1"
    assert tests["env"]["WB_NIGHTLY_TESTS"] == "1"  # and every test make test leaves to the nightly
    assert '-m "network or nightly"' in tests["run"] and "-p workbench_ci.pytest_shard" in tests["run"]
    assert " -k " not in tests["run"]
    [cells] = [s for n, s in steps.items() if n.startswith("Network cells")]
    assert cells["env"]["MATRIX"] == "ci/matrix-network.yaml"
    assert "make venv\n" in _runs(network) + "\n"  # the dev extras: pytest
    merge = _runs(_jobs(NIGHTLY)["merge"])
    assert "--merge network/network-*/cells --out nightly/network" in merge


def test_the_shards_and_lanes_install_only_the_package():
    jobs = _jobs(NIGHTLY)
    assert "make venv EXTRAS=" in _runs(jobs["shard"]) and "make venv EXTRAS=" in _runs(jobs["guard"])
    assert "make venv EXTRAS=" in _runs(_jobs(PULL_REQUEST)["guard-gate"])


def test_the_guard_lane_is_its_own_job():
    jobs = _jobs(NIGHTLY)
    assert "workbench upstream nightly --out guard --history guard-history/upstream_lane.jsonl" in _runs(jobs["guard"])
    assert all("upstream nightly" not in _runs(j) for n, j in jobs.items() if n != "guard")


def test_the_report_gets_the_guard_lanes_night_and_history():
    jobs = _jobs(NIGHTLY)
    merge = jobs["merge"]
    assert {"guard", "shard", "network"} <= set(merge["needs"])
    got = {s["with"]["name"]: s for s in _uses(merge, "actions/download-artifact") if "name" in s.get("with", {})}
    # the artifacts the guard job uploads, each optional (a lane that wrote nothing is said so in the report)
    uploaded = {s["with"]["name"]: s["with"]["path"] for s in _uses(jobs["guard"], "actions/upload-artifact")}
    assert set(got) == {"guard", "guard-history"} == set(uploaded)
    assert all(s.get("continue-on-error") is True for s in got.values())
    runs = " ".join(_runs(merge).split())
    lane, history = got["guard"]["with"]["path"], got["guard-history"]["with"]["path"]
    assert f"--lane {lane} --lane-history {history}/upstream_lane.jsonl" in runs
    assert "--history guard-history/upstream_lane.jsonl" in _runs(jobs["guard"])  # the file the report reads


def test_pull_requests_run_make_test_and_the_guards_gate_with_sarif():
    jobs = _jobs(PULL_REQUEST)
    doc = yaml.safe_load(PULL_REQUEST.read_text())
    assert doc["permissions"] == {} and "pull_request" in doc[True]  # PyYAML reads the key `on` as True
    test = jobs["test"]
    assert "make test" in _runs(test) and _uses(test, "actions/checkout")
    assert test["steps"][-1]["env"] == {"WB_REQUIRE_BROWSER": "1"}  # a missing browser fails, never skips
    gate = jobs["guard-gate"]
    assert gate["permissions"] == {"contents": "read", "security-events": "write"}
    [step] = [s for s in gate["steps"] if "workbench upstream lint" in s.get("run", "")]
    assert '--replay --fail-on new --sarif "$SARIF"' in step["run"]
    [upload] = _uses(gate, "github/codeql-action/upload-sarif")
    assert upload["with"]["sarif_file"] == step["env"]["SARIF"] and "!cancelled()" in upload["if"]
    # the release it gates: the newest one the shipped triage file covers
    triage = json.loads((ROOT / "workbench" / "assets" / "upstream_triage.json").read_text())["entries"]
    newest = max((r for e in triage.values() for r in e["releases"]), key=Version)
    assert step["env"]["SGLANG"] == newest


def test_the_example_workflow_is_gone_and_nothing_names_it():
    assert not (ROOT / "ci" / "nightly.example.yml").exists()
    named = subprocess.run(
        ["git", "grep", "-l", "nightly.example", "--", ".", ":!tests/ci/test_workflow.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert named.stdout == "", f"files still naming the example workflow:\n{named.stdout}"
