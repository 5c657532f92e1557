"""Medians with 95 % bootstrap intervals over repeats, and the "not different" rule for two figures."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence

BOOTSTRAP_RESAMPLES = 2000
INTERVAL = "95 % percentile bootstrap interval of the median over repeats (2000 resamples, seed 0)"


def _percentiles(values: list[float]) -> list[float]:
    values = sorted(values)
    at = lambda q: values[min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))]  # noqa: E731
    return [at(0.025), at(0.975)]


def bootstrap(samples: Sequence[Sequence[float]], stat: Callable[..., float], seed: int = 0) -> list[float]:
    """95 % interval of ``stat(*resampled)``, each sample list resampled with replacement on its own."""
    rng = random.Random(seed)
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        draws.append(stat(*[[s[rng.randrange(len(s))] for _ in s] for s in samples]))
    return _percentiles(draws)


def summarize(values: Sequence[float | None]) -> dict | None:
    """{"median", "ci95": [low, high], "n"} of the non-None values; None when there are none."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "ci95": bootstrap([vals], statistics.median), "n": len(vals)}


def ratio(num: Sequence[float], den: Sequence[float]) -> dict | None:
    """median(num) / median(den) with its bootstrap interval (both sides resampled independently)."""
    num, den = [v for v in num if v is not None], [v for v in den if v is not None]
    if not num or not den or statistics.median(den) == 0:
        return None
    stat = lambda a, b: statistics.median(a) / statistics.median(b)  # noqa: E731
    return {"median": stat(num, den), "ci95": bootstrap([num, den], stat), "n": [len(num), len(den)]}


def different(a: dict | None, b: dict | None) -> bool | None:
    """False when the two intervals overlap ("not different"), True when they are apart."""
    if not a or not b:
        return None
    return a["ci95"][1] < b["ci95"][0] or b["ci95"][1] < a["ci95"][0]


def fmt(s: dict | None, scale: float = 1.0, digits: int = 1) -> str:
    """``12.3 [11.9, 12.8]`` (the median and its interval, times ``scale``)."""
    if not s:
        return "n/a"
    lo, hi = s["ci95"]
    return f"{s['median'] * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"
