"""Distribution-free intervals for a median, with their exact coverage, and the sign test they invert.

For n independent draws of a continuous variable, the interval between the k-th smallest and the
k-th largest value, [x_(k), x_(n-k+1)], contains the population median with probability

    coverage(n, k) = 1 - 2 * P(Binomial(n, 1/2) <= k - 1)

whatever the distribution (each draw falls below the median with probability 1/2). ``median_interval``
takes the narrowest such interval whose coverage reaches the level asked for; below 6 draws no
interval reaches 95 % (n = 5 gives at most 93.8 %), and it says so instead of printing "95 %".
The interval excludes a value m exactly when the two-sided sign test rejects "median = m" at
1 - coverage, which is how ``repeats_to_decide`` projects how many repeats a verdict needs.

A percentile bootstrap of a median over n values returns at most the sample range, whose coverage
is coverage(n, 1): 75 % at n = 3, 93.8 % at n = 5; it is not used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

LEVEL = 0.95
METHOD = "order statistics (distribution-free interval for the median)"


def binom_cdf_half(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def coverage(n: int, k: int) -> float:
    """Exact coverage of [x_(k), x_(n-k+1)] for the median of n continuous i.i.d. draws (1 <= k <= n/2)."""
    if not 1 <= k <= n - k + 1:
        raise ValueError(f"invalid order {k!r} for n={n}; valid: 1..{(n + 1) // 2}")
    return 1.0 - 2.0 * binom_cdf_half(n, k - 1)


def order_for(n: int, level: float = LEVEL) -> int:
    """The largest k whose interval still covers with probability >= ``level``; 1 (the range) when
    no k reaches it (then the coverage is below ``level`` and must be printed as it is)."""
    k = 1
    while k + 1 <= n - k and coverage(n, k + 1) >= level:
        k += 1
    return k


def min_repeats(level: float = LEVEL) -> int:
    """The fewest draws whose widest interval (the range) reaches ``level``: 6 for 95 %."""
    n = 2
    while coverage(n, 1) < level:
        n += 1
    return n


def median_interval(values: Sequence[float], level: float = LEVEL) -> dict:
    """{"median", "ci": [low, high], "n", "k", "coverage", "level", "method"} of ``values``.

    ``coverage`` is the exact coverage of the interval given (>= ``level`` from n = 6 on at 95 %)."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        raise ValueError("a median interval needs at least one value")
    k = order_for(n, level) if n > 1 else 1
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    return {
        "median": median,
        "ci": [xs[k - 1], xs[n - k]],
        "n": n,
        "k": k,
        "coverage": coverage(n, k) if n > 1 else 0.0,
        "level": level,
        "method": METHOD,
    }


def repeats_to_decide(values: Sequence[float], at: float = 1.0, level: float = LEVEL, cap: int = 200) -> int | None:
    """How many repeats in all would put the interval past ``at`` if the share of values on the
    median's far side of ``at`` stayed as observed (the sign test at ``1 - level``). None when the
    observed values split evenly around ``at`` (no number of repeats would decide it at that split)
    or it would take more than ``cap``."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return None
    above, below = sum(v > at for v in xs), sum(v < at for v in xs)
    far = min(above, below) + sum(v == at for v in xs)  # ties count against a decision
    share = far / n
    if share >= 0.5:
        return None
    for total in range(max(n, 2), cap + 1):
        k = order_for(total, level)
        if coverage(total, k) >= level and math.ceil(share * total) <= k - 1:
            return total
    return None
