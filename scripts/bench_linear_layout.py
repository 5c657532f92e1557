"""The shipped target's linear layers, row-major (out, in) weights vs the loader's column-major layout.

    python scripts/bench_linear_layout.py [--threads 1] [--repeats 9]

Runs all of the target's ``nn.Linear`` layers once per call on M = 1..16 rows (M = 1 is a decode
step, 16 a (5,4,16) verify), repeats interleaved, and prints the median and the min-max over
repeats of each layout, in milliseconds per pass over the model's linears.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workbench.models.loader import load_models  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--calls", type=int, default=100, help="passes per timed sample")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, _ = load_models()  # the loader's layout: column-major
    column = [m.weight for m in target.modules() if isinstance(m, torch.nn.Linear)]
    layouts = {"row-major (out, in)": [w.contiguous() for w in column], "column-major (loader)": column}
    print(
        f"{len(column)} linear layers, {sum(w.numel() for w in column) * 4 / 1e6:.1f} MB fp32, "
        f"{args.threads} thread(s), {args.repeats} repeats x {args.calls} passes"
    )
    with torch.inference_mode():
        for rows in (1, 2, 4, 6, 8, 16):
            xs = [torch.randn(rows, w.shape[1]) for w in column]
            samples = {name: [] for name in layouts}
            for _ in range(args.repeats):
                for name, weights in layouts.items():
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        for x, w in zip(xs, weights, strict=False):
                            F.linear(x, w)
                    samples[name].append((time.perf_counter() - t0) / args.calls * 1e3)
            cells = [
                f"{name} {statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}] ms" for name, v in samples.items()
            ]
            print(f"M={rows:2d}  " + "   ".join(cells))


if __name__ == "__main__":
    main()
