"""pytest plugin: ``pytest -p workbench_ci.pytest_shard --shard i/N`` runs one shard of the selected tests.

The nightly workflow's network jobs split the network tests this way (one job per shard, the count
written once in the workflow). After every other selection (``-m``, ``-k``), the tests are sorted by
node id and shard ``i`` keeps every N-th one starting at the i-th, so the shards are disjoint and
together hold every selected test. The rest are reported as deselected.
"""

from __future__ import annotations

import pytest

from workbench_ci.matrix import MatrixError, parse_shard


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--shard i/N`` (1-based)."""
    parser.addoption("--shard", default=None, metavar="i/N", help="run shard i of N of the selected tests")


def shard_of(nodeids: list[str], i: int, n: int) -> list[str]:
    """The node ids of shard ``i`` of ``n``: every n-th of the sorted ids, from the i-th."""
    return sorted(nodeids)[i - 1 :: n]


@pytest.hookimpl(trylast=True)  # after -m / -k deselection: the shards split what is selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this shard's tests; the others are deselected."""
    spec = config.getoption("shard")
    if spec is None:
        return
    try:
        i, n = parse_shard(spec)
    except MatrixError as e:
        raise pytest.UsageError(str(e)) from None
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--shard {spec!r}: expected i/N with 1 <= i <= N, e.g. 1/3")
    keep = set(shard_of([it.nodeid for it in items], i, n))
    config.hook.pytest_deselected(items=[it for it in items if it.nodeid not in keep])
    items[:] = [it for it in items if it.nodeid in keep]
