"""Shared fixtures. Tests marked ``network`` need the package registries and a large install;
they run only with WB_NETWORK_TESTS=1 (the nightly sets it) and say so when skipped. Tests marked
``nightly`` need neither, but are long: they run only with WB_NIGHTLY_TESTS=1, which the nightly
workflow's network shards set (`make test` leaves them to it, and says so)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKS_ENV = "WB_COLLECTED_MARKS"  # a file: a session with it set writes there each test's marks (collected_marks)


def pytest_configure(config):
    import workbench_kernels

    workbench_kernels.setup()  # the session's entry point chooses where the Triton kernels run


# `make test` runs the suite on pytest-xdist workers with `--dist loadfile`: a test file is one unit of
# work (its module fixtures run once), except the tests below, each a unit of its own so that it runs
# beside the rest of its file (each is most of its file's time; `--durations` of make test).
OWN_UNITS = {
    "tests/run/test_dp.py::test_good_revisions_pass_everywhere_with_identical_outputs[pr-28221]",
    "tests/run/test_dp.py::test_in_place_fix_turns_the_crash_into_ok_and_undo_brings_it_back",
    "tests/notebooks/test_notebooks.py::test_02_fix_is_lossless_and_undo_brings_the_crash_back",
    "tests/experiments/test_compare.py::test_a_failed_run_is_kept_as_a_failed_row_and_the_rest_is_shown",
}
# The longest units, longest first: they start first, so no worker begins one while the others finish.
# Only the order changes (`--no-loadscope-reorder` keeps it); other units follow in file order.
LONG_FIRST = (
    "tests/run/test_dp.py",
    "tests/ci/test_workflow_jobs.py",
    "tests/notebooks/test_lab_browser.py",
    "tests/notebooks/test_notebooks.py::test_02_fix_is_lossless_and_undo_brings_the_crash_back",
    "tests/ci/test_nightly.py",
    "tests/run/test_dp.py::test_good_revisions_pass_everywhere_with_identical_outputs[pr-28221]",
    "tests/ci/test_ci_run.py",
    "tests/debug/test_debug_bundle.py",
    "tests/notebooks/test_notebooks.py",
    "tests/test_training_scripts.py",
    "tests/experiments/test_compare.py",
    "tests/run/test_dp.py::test_in_place_fix_turns_the_crash_into_ok_and_undo_brings_it_back",
    "tests/engine/test_engine.py",
    "tests/upstream/replay/test_upstream_oracle_pool.py",
    "tests/experiments/test_compare.py::test_a_failed_run_is_kept_as_a_failed_row_and_the_rest_is_shown",
)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadfile`: itself if in OWN_UNITS, else its file."""
    return nodeid if nodeid in OWN_UNITS else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with the units of `work_unit` (pytest-xdist's own `xdist_group` marks do not
    reach its scheduler under pytest 9: it renames `item._nodeid`, which pytest 9 no longer reads)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class UnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return UnitScheduling(config, log)


def pytest_collection_finish(session):
    if path := os.environ.get(MARKS_ENV):
        marks = {item.nodeid: sorted({m.name for m in item.iter_markers()}) for item in session.items}
        Path(path).write_text(json.dumps(marks))


@pytest.fixture(scope="session")
def collected_marks(tmp_path_factory) -> dict[str, list[str]]:
    """Every test under tests/ (node id, as `pytest --collect-only -q` prints it) with the names of its marks,
    which is what `-m` selects by: from ONE collection of the tree in a subprocess per test run, shared by
    the pytest-xdist workers through a file in the run's temp dir (a full collection costs about 10 CPU-s)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's, above the workers'
    out = shared / "collected-marks.json"
    with open(shared / "collected-marks.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            part = out.with_suffix(".part")
            res = subprocess.run(
                [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/"],
                cwd=ROOT,
                env={**os.environ, MARKS_ENV: str(part)},
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert res.returncode == 0 and part.is_file(), (
                f"collection failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
            )
            part.rename(out)
    return json.loads(out.read_text())


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker collects the same order: the units' order
        rank = {unit: i for i, unit in enumerate(LONG_FIRST)}
        items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))
    skips = {
        "network": (
            "WB_NETWORK_TESTS",
            "network test: needs the package registries and a large install; "
            "set WB_NETWORK_TESTS=1 to run it (the nightly does)",
        ),
        "nightly": (
            "WB_NIGHTLY_TESTS",
            "nightly test: long, run by the nightly workflow's network shards; set WB_NIGHTLY_TESTS=1 to run it here",
        ),
    }
    for mark, (var, reason) in skips.items():
        if os.environ.get(var) != "1":
            for item in items:
                if mark in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))


MATH_THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@pytest.fixture(scope="session", autouse=True)
def _threads_per_worker():
    """Under pytest-xdist the workers share the cores: each worker's torch gets its share of them
    (the cores divided by the workers), not all of them; DP ranks divide their own share as before.
    The processes a worker starts (notebook kernels, JupyterLab's, `workbench` and script runs) get the
    same share through the math libraries' variables, as the nightly gives its notebooks
    (``workbench_ci.cells.thread_env``): torch's OpenMP threads busy-wait, so a second thread per process
    on a busy box burns CPU the other worker needs. Variables already set are kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        yield
        return
    import torch

    share = max(1, (os.cpu_count() or 1) // workers)
    torch.set_num_threads(share)
    added = [k for k in MATH_THREADS if k not in os.environ]
    os.environ.update({k: str(share) for k in added})
    yield
    for k in added:
        os.environ.pop(k, None)


@pytest.fixture(scope="session")
def prompts():
    from workbench.models.loader import load_prompts

    return load_prompts()


@pytest.fixture(scope="session", autouse=True)
def _bundles_in_pytest_tmp(tmp_path_factory):
    """Crash bundles the tests provoke go under pytest's own tmp folder, not the user's cache."""
    old = os.environ.get("WB_BUNDLE_DIR")
    os.environ["WB_BUNDLE_DIR"] = str(tmp_path_factory.mktemp("crash-bundles"))
    yield
    if old is None:
        os.environ.pop("WB_BUNDLE_DIR", None)
    else:
        os.environ["WB_BUNDLE_DIR"] = old
