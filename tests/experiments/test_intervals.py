"""The order-statistic interval of a median: its exact coverage formula against simulation on skewed
data (10,000 samples per case), the repeats a 95 % interval needs, and the sign-test projection."""

from __future__ import annotations

import math
import random

import pytest

from workbench.experiments.intervals import (
    coverage,
    median_interval,
    min_repeats,
    order_for,
    repeats_to_decide,
)

SIMS = 10_000


def _simulated(draw, median: float, n: int, seed: int) -> float:
    rng = random.Random(seed)
    hits = 0
    for _ in range(SIMS):
        lo, hi = median_interval([draw(rng) for _ in range(n)])["ci"]
        hits += lo <= median <= hi
    return hits / SIMS


def test_exact_coverage_and_the_repeats_95_percent_needs():
    assert coverage(3, 1) == pytest.approx(0.75) and coverage(5, 1) == pytest.approx(1 - 2 / 32)
    assert min_repeats() == 6 and coverage(6, 1) == pytest.approx(1 - 2 / 64)
    assert [order_for(n) for n in (5, 6, 8, 9, 12, 18)] == [1, 1, 1, 2, 3, 5]
    assert all(coverage(n, order_for(n)) >= 0.95 for n in range(6, 60))
    assert all(coverage(n, order_for(n) + 1) < 0.95 for n in range(6, 60))  # the narrowest that reaches 95 %
    with pytest.raises(ValueError, match="invalid order"):
        coverage(4, 3)


@pytest.mark.parametrize(
    "name,draw,median",
    [
        ("lognormal", lambda r: r.lognormvariate(0.0, 1.0), 1.0),
        ("exponential", lambda r: r.expovariate(1.0), math.log(2.0)),
        ("paired ratio with shared drift", lambda r: 2.0 * r.lognormvariate(0, 0.08) / r.lognormvariate(0, 0.08), 2.0),
    ],
)
@pytest.mark.parametrize("n", [6, 9, 12])
def test_simulated_coverage_matches_the_stated_coverage(name, draw, median, n):
    stated = median_interval([1.0] * n)["coverage"]
    sim = _simulated(draw, median, n, seed=n)
    se = math.sqrt(stated * (1 - stated) / SIMS)
    assert stated >= 0.95 and abs(sim - stated) < 4 * se, f"{name} n={n}: simulated {sim:.4f}, stated {stated:.4f}"


def test_interval_fields_and_small_samples_say_their_true_coverage():
    iv = median_interval([3.0, 1.0, 2.0, 10.0, 4.0, 5.0])
    assert iv["median"] == 3.5 and iv["ci"] == [1.0, 10.0] and iv["n"] == 6 and iv["k"] == 1
    assert iv["coverage"] == pytest.approx(0.96875) and "order statistics" in iv["method"]
    three = median_interval([1.0, 2.0, 3.0])
    assert three["ci"] == [1.0, 3.0] and three["coverage"] == pytest.approx(0.75)  # not called 95 %
    nine = median_interval(list(range(9)))
    assert nine["ci"] == [1.0, 7.0] and nine["coverage"] == pytest.approx(1 - 2 * 10 / 512)


def test_repeats_to_decide_projects_the_sign_test():
    assert repeats_to_decide([1.2, 1.1, 1.3]) == 6  # all above 1: six repeats put the range above it
    assert repeats_to_decide([1.2, 0.9, 1.3, 1.1, 1.4, 1.5]) == 12  # 1 in 6 below: k(12) = 3 allows 2 below
    assert repeats_to_decide([1.2, 0.9, 1.1, 0.8]) is None  # an even split: no number of repeats decides it
    iv = median_interval([1.2, 0.9, 1.3, 1.1, 1.4, 1.5] * 2)
    assert iv["ci"][0] > 1.0  # what the projection promised
