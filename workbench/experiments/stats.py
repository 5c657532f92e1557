"""Medians over repeats with distribution-free intervals, paired ratios, and the verdicts they carry.

Every figure over repeats is the median with its order-statistic interval (``intervals``), whose
exact coverage is stated with it. Two arms measured in the same repeats (greedy and EAGLE3, two
backends, dp 1 and dp 2) are compared by the ratio of their values within each repeat, so noise
both share (the box busier in one repeat than another) cancels; the verdict reads that ratio's
interval: "faster" when it lies above 1, "slower" below, otherwise undecided, with the repeats a
decision would take at the observed split (``intervals.repeats_to_decide``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from workbench.experiments.intervals import LEVEL, METHOD, median_interval, min_repeats, repeats_to_decide

if TYPE_CHECKING:
    from workbench.run.record import RunRecord

INTERVAL = (
    f"median over repeats with the order-statistic interval [x_(k), x_(n-k+1)] (distribution-free; exact "
    f"coverage 1 - 2 P(Binomial(n, 1/2) <= k - 1) stated with each interval, >= {100 * LEVEL:.0f} % from n = "
    f"{min_repeats()}); ratios are paired: one ratio per repeat, both arms from the same repeat"
)


def summarize(values: Sequence[float | None]) -> dict | None:
    """The median of the non-None values with its interval (``intervals.median_interval``) and the
    values themselves; None when there are none."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {**median_interval(vals), "values": vals}


def paired_ratio(num: Sequence[float | None], den: Sequence[float | None]) -> dict | None:
    """Per-repeat ratios num[i] / den[i] (repeats where either is missing or den is 0 dropped),
    summarised as ``summarize``; None without a pair."""
    if len(num) != len(den):
        raise ValueError(f"paired samples need equal lengths; got {len(num)} and {len(den)}")
    ratios = [a / b for a, b in zip(num, den, strict=True) if a is not None and b]
    return summarize(ratios)


def verdict(ratio: dict | None, above: str = "faster", below: str = "slower") -> dict:
    """What a paired ratio's interval says against 1.

    {"verdict": above | below | "undecided" | "n/a", "repeats_needed": int | None (undecided: the
    repeats in all that would decide it at the observed split; None when the ratios split evenly
    around 1), "text": one line}."""
    if not ratio:
        return {"verdict": "n/a", "repeats_needed": None, "text": "n/a (not measured)"}
    lo, hi = ratio["ci"]
    cov = ratio["coverage"]
    if cov >= LEVEL and lo > 1.0:
        return {"verdict": above, "repeats_needed": None, "text": f"{above} (interval above 1)"}
    if cov >= LEVEL and hi < 1.0:
        return {"verdict": below, "repeats_needed": None, "text": f"{below} (interval below 1)"}
    need = repeats_to_decide(ratio["values"])
    if need is None:
        why = "the repeats fall on both sides of 1 about evenly: no difference this measurement can resolve"
    else:
        why = f"about {need} repeats in all would decide it at the observed split ({ratio['n']} run)"
    if cov < LEVEL and (lo > 1.0 or hi < 1.0):
        why = f"only {ratio['n']} repeats: the interval's coverage is {100 * cov:.1f} % < {100 * LEVEL:.0f} %; " + why
    return {"verdict": "undecided", "repeats_needed": need, "text": f"undecided ({why})"}


def records_commit(records: Sequence[RunRecord]) -> str | list[str] | None:
    """The workbench commit the runs' records name (``env.workbench_commit``): one commit, the sorted
    distinct commits when the runs differ, None when no record names one."""
    found = sorted({c for r in records if (c := r.env.get("workbench_commit"))})
    return found[0] if len(found) == 1 else (found or None)


def fmt(s: dict | None, scale: float = 1.0, digits: int = 1) -> str:
    """``12.3 [11.9, 12.8]``: the median and its interval, times ``scale``."""
    if not s:
        return "n/a"
    lo, hi = s["ci"]
    return f"{s['median'] * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"


def fmt_interval(s: dict | None, scale: float = 1.0, digits: int = 2) -> str:
    """``2.05 (95 % CI [1.81, 2.30], order statistics, exact coverage 96.9 %, n = 6)``; an interval
    whose coverage falls short of the level is called what it is."""
    if not s:
        return "n/a"
    lo, hi = (v * scale for v in s["ci"])
    cov = 100 * s["coverage"]
    name = f"{100 * s['level']:.0f} % CI" if s["coverage"] >= s["level"] else f"interval below {100 * s['level']:.0f} %"
    return (
        f"{s['median'] * scale:.{digits}f} ({name} [{lo:.{digits}f}, {hi:.{digits}f}], order statistics, "
        f"exact coverage {cov:.1f} %, n = {s['n']})"
    )


__all__ = ["INTERVAL", "METHOD", "fmt", "fmt_interval", "paired_ratio", "records_commit", "summarize", "verdict"]
