""".ci/run's pytest selections pick tests: each file a `-k` selection names holds at least one test it
selects (collected by pytest with the same -m and -k, nothing run), and every network test .ci/run
leaves out is one the nightly workflow's network shards run (they take every network test; which
shard runs which: tests/ci/test_workflow_jobs.py)."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CI_RUN = ROOT / ".ci" / "run"
CI_COLD = ROOT / "scripts" / "ci_cold.sh"


def pytest_calls(script: str) -> list[list[str]]:
    """The argument lists after `python -m pytest` in the script, continuation lines joined."""
    calls = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for i in range(len(words) - 2):
            if words[i].endswith("python") and words[i + 1 : i + 3] == ["-m", "pytest"]:
                calls.append(words[i + 3 :])
    return calls


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def collect(args: list[str]) -> list[str]:
    """Node ids pytest selects for these arguments (collection only; one collection per argument list in
    a test session). The whole tree's marks come from conftest's collected_marks, one collection per run."""
    return list(_collect(tuple(args)))


@functools.cache
def _collect(args: tuple[str, ...]) -> tuple[str, ...]:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode in (0, 5), f"collection failed for {args}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return tuple(x for x in res.stdout.splitlines() if "::" in x)


def test_every_k_selection_picks_tests_in_each_file_it_names():
    calls = [c for c in pytest_calls(CI_RUN.read_text()) if "-k" in c]
    assert calls, ".ci/run has no pytest call with -k: this test would check nothing"
    for args in calls:
        files = [a for a in args if a.endswith(".py")]
        marks = ["-m", _option(args, "-m")] if "-m" in args else []
        picked = collect([*marks, "-k", _option(args, "-k"), *files])
        empty = [f for f in files if not any(x.startswith(f + "::") for x in picked)]
        assert files and not empty, f".ci/run's -k {_option(args, '-k')!r} selects none of the tests in {empty}"


def marked(marks: dict[str, list[str]], mark: str) -> list[str]:
    """The node ids `pytest -m MARK tests/` selects: the tests carrying the mark (conftest's collected_marks)."""
    return [nodeid for nodeid, names in marks.items() if mark in names]


def test_the_network_tests_ci_run_leaves_out_run_in_the_nightly(collected_marks):
    calls = [c for c in pytest_calls(CI_RUN.read_text()) if _option(c, "-m") == "network"]
    assert calls, ".ci/run runs no network tests"
    everything = set(marked(collected_marks, "network"))
    in_ci_run = set()
    for args in calls:
        in_ci_run |= set(collect(["-m", "network", "-k", _option(args, "-k"), *[a for a in args if a.endswith(".py")]]))
    left_out = everything - in_ci_run
    # recall on a release, both end-to-end guard tests, the 0.5.12 seed replay, the guard job's lane, the
    # bug corpus, the family's confirmation and the real runtime on 0.5.12's V1 worker
    assert {x.split("::")[0] for x in left_out} == {
        "tests/upstream/static/test_upstream_recall.py",
        "tests/upstream/test_guard_e2e_network.py",
        "tests/upstream/replay/test_upstream_replay.py",
        "tests/ci/test_workflow_jobs.py",
        "tests/upstream/static/test_upstream_corpus.py",  # the corpus on the real wheels (~2.5 min)
        # the family's 0.5.12 finding, confirmed by replay and end to end
        "tests/upstream/static/test_upstream_family.py",
        "tests/upstream/runtime/test_runtime_explore_network.py",  # a subset of the explore matrix on a release
        "tests/upstream/replay/test_upstream_oracle.py",  # the oracle recall on a real release's subset
        # rank bundles in the release kernel, notebook 07 (~3 min)
        "tests/upstream/runtime/test_runtime_bundle_network.py",
        "tests/notebooks/test_lab_browser_runtime.py",  # the same in JupyterLab at a breakpoint
        "tests/upstream/runtime/test_runtime_network.py",  # 0.5.12's V1 worker (three runs), below
        "tests/upstream/runtime/test_runtime_report.py",  # each upstream-ready report's fix applied to 0.5.23
        "tests/upstream/static/test_upstream_lint_misses.py",  # the lint's former misses on the release files
        "tests/upstream/replay/test_upstream_graph_runner.py",  # the DSpark graph-runner crash on 0.5.16 / 0.5.17
    }, left_out
    runtime = {x for x in left_out if x.startswith("tests/upstream/runtime/test_runtime_network.py::")}
    assert runtime == {
        "tests/upstream/runtime/test_runtime_network.py::"
        "test_runtime_0_5_12_v1_worker_reaches_the_seed_crash_and_pr_28221_fixes_it"
    }, runtime
    nightly = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())["jobs"]["network"]
    [step] = [s for s in nightly["steps"] if '-m "network or nightly"' in s.get("run", "")]
    # the network shards select with -m network alone over all of tests/: every test left out above
    assert " -k " not in step["run"] and step["env"]["TESTS"] == "tests/", (
        "the nightly does not take every network test"
    )


def test_the_tests_make_test_leaves_to_the_nightly_run_there_and_only_there(collected_marks):
    """A test marked ``nightly`` is skipped by `make test` (saying where it runs) and selected by the nightly
    workflow's network shards, with the variable that lets it run there."""
    moved = marked(collected_marks, "nightly")
    assert moved, "no test is marked nightly: this test would check nothing"
    nightly = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())["jobs"]["network"]
    [step] = [s for s in nightly["steps"] if s.get("name", "").startswith("Network tests")]
    assert '-m "network or nightly"' in step["run"] and step["env"]["WB_NIGHTLY_TESTS"] == "1"
    assert step["env"]["TESTS"] == "tests/" and " -k " not in step["run"]
    files = sorted({x.split("::")[0] for x in moved})
    env = {k: v for k, v in os.environ.items() if k != "WB_NIGHTLY_TESTS"}
    res = subprocess.run(  # as make test runs them: skipped, each with the reason
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "nightly", "-rs", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0 and f"{len(moved)} skipped" in res.stdout, res.stdout[-3000:]
    assert res.stdout.count("nightly test: long, run by the nightly workflow's network shards") >= 1, res.stdout


def test_the_ci_scripts_pass_shellcheck():
    shellcheck = Path(sys.executable).parent / "shellcheck"
    res = subprocess.run([str(shellcheck), str(CI_RUN), str(CI_COLD)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bogus"], "unknown argument '--bogus'; valid: none (the whole .ci/run) or --env VERSION"),
        (["--env"], "--env needs a release, e.g. --env 0.5.14"),
        (["--env", "0.5.14", "more"], "unexpected arguments after --env 0.5.14: more"),
    ],
)
def test_ci_cold_refuses_bad_arguments_with_exit_2_before_anything_runs(args: list[str], message: str) -> None:
    res = subprocess.run(["bash", str(CI_COLD), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and message in res.stderr, (res.returncode, res.stderr)
    assert "ci_cold: clone" not in res.stdout
