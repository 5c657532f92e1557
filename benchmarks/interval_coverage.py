"""Simulated coverage of the intervals the comparisons print (workbench.experiments.intervals).

    python benchmarks/interval_coverage.py [--sims 10000] [--seed 0] [--json OUT]

For each skewed distribution and each number of repeats n, draws ``--sims`` samples of n values,
builds the order-statistic interval of the median and counts how often it holds the true median;
the paired rows draw (greedy, EAGLE3) tokens/s sharing a per-repeat machine drift and count how
often the interval of the per-repeat ratios holds the true median ratio. Prints the simulated
coverage next to the exact one the reports state, and the percentile-bootstrap coverage the
earlier reports labelled 95 %. ``--json OUT`` also writes the table with the command and commit
(``workbench/assets/interval_coverage.json``, which docs/figures.md is generated from).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench.experiments.intervals import coverage, median_interval, order_for  # noqa: E402
from workbench.run.provenance import workbench_commit  # noqa: E402

DISTRIBUTIONS = {
    # name: (draw(rng), true median)
    "lognormal(0, 1)": (lambda r: r.lognormvariate(0.0, 1.0), 1.0),
    "exponential(1)": (lambda r: r.expovariate(1.0), math.log(2.0)),
    "tokens/s with stalls (10 % at 0.5x)": (
        lambda r: (0.5 if r.random() < 0.1 else 1.0) * 200 * r.lognormvariate(0, 0.05),
        None,  # estimated by simulation below
    ),
}


def simulated_coverage(draw, median: float, n: int, sims: int, rng: random.Random) -> float:
    hits = 0
    for _ in range(sims):
        lo, hi = median_interval([draw(rng) for _ in range(n)])["ci"]
        hits += lo <= median <= hi
    return hits / sims


def paired_ratio_draw(ratio: float):
    """One repeat's EAGLE3/greedy tokens/s ratio: a drift both modes share, independent run noise."""

    def draw(r: random.Random) -> float:
        drift = r.lognormvariate(0, 0.3)  # the box gets busier or quieter between repeats
        greedy = 120 * drift * r.lognormvariate(0, 0.08)
        eagle = 120 * ratio * drift * r.lognormvariate(0, 0.08)
        return eagle / greedy

    return draw


def bootstrap_percentile_coverage(draw, median: float, n: int, sims: int, rng: random.Random, resamples=200) -> float:
    hits = 0
    for _ in range(sims):
        xs = [draw(rng) for _ in range(n)]
        meds = sorted(sorted(rng.choice(xs) for _ in xs)[n // 2] for _ in range(resamples))
        hits += meds[int(0.025 * (resamples - 1))] <= median <= meds[int(round(0.975 * (resamples - 1)))]
    return hits / sims


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=10000, help="simulated samples per row (default 10000)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the table here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = {
        "command": "python benchmarks/interval_coverage.py " + " ".join(sys.argv[1:]),
        "workbench_commit": workbench_commit(),
    }
    out.update(sims=args.sims, seed=args.seed, rows=[], bootstrap=[])
    rng = random.Random(args.seed)
    rows = [(name, draw, med) for name, (draw, med) in DISTRIBUTIONS.items()]
    rows.append(("paired EAGLE3/greedy ratio, true 2.0", paired_ratio_draw(2.0), 2.0))
    print(f"{'distribution':40s} {'n':>3s} {'k':>2s} {'exact':>7s} {'simulated':>9s}  ({args.sims} samples each)")
    for name, draw, med in rows:
        if med is None:
            big = sorted(draw(rng) for _ in range(200001))
            med = big[len(big) // 2]
        for n in (6, 9, 12, 18):
            k = order_for(n)
            sim = simulated_coverage(draw, med, n, args.sims, rng)
            print(f"{name:40s} {n:3d} {k:2d} {100 * coverage(n, k):6.1f}% {100 * sim:8.1f}%")
            out["rows"].append({"data": name, "n": n, "k": k, "exact": coverage(n, k), "simulated": sim})
    print("\npercentile bootstrap of the median (200 resamples), as the earlier reports used, lognormal(0, 1):")
    draw, med = DISTRIBUTIONS["lognormal(0, 1)"]
    for n in (3, 5):
        sims = min(args.sims, 2000)
        sim = bootstrap_percentile_coverage(draw, med, n, sims, rng)
        bound = 100 * coverage(n, 1)
        print(f"  n = {n}: simulated {100 * sim:.1f}% (labelled 95 %; at most the sample range's {bound:.1f}%)")
        out["bootstrap"].append({"n": n, "sims": sims, "simulated": sim, "sample_range_coverage": coverage(n, 1)})
    if args.json_out:
        out["run_s"] = round(time.perf_counter() - t0, 1)
        args.json_out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {args.json_out}")


if __name__ == "__main__":
    main()
