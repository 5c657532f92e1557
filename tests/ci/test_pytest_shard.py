"""ci/pytest_shard.py: the shards of a selection are disjoint and together hold all of it, and a bad
--shard is pytest's usage error (exit 4) naming the value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench_ci.pytest_shard import shard_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_partition_the_selection(n):
    ids = [f"tests/test_{c}.py::t{i}" for c in "zyxw" for i in range(5)]
    shards = [shard_of(ids, i, n) for i in range(1, n + 1)]
    assert sorted(x for s in shards for x in s) == sorted(ids)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


@pytest.mark.parametrize("bad", ["4/3", "0/3", "x", "1/0"])
def test_a_bad_shard_is_a_usage_error(bad):
    args = [
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "--noconftest",
        "-p",
        "no:cacheprovider",
        "-p",
        "workbench_ci.pytest_shard",
    ]
    res = subprocess.run(
        [sys.executable, *args, "--shard", bad, "tests/test_style.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 4 and f"--shard {bad!r}" in res.stderr, (res.returncode, res.stderr[-1000:])


def test_a_shard_keeps_its_share_of_a_real_selection():
    args = [
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "--noconftest",
        "-p",
        "no:cacheprovider",
        "-p",
        "workbench_ci.pytest_shard",
    ]
    picked = []
    for i in (1, 2):
        res = subprocess.run(
            [sys.executable, *args, "--shard", f"{i}/2", "tests/ci/test_pytest_shard.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-1000:]
        picked.append([x for x in res.stdout.splitlines() if "::" in x])
    assert picked[0] and picked[1] and not set(picked[0]) & set(picked[1])
    assert len(picked[0]) + len(picked[1]) == 9  # the tests of this file
