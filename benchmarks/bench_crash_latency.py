"""Time from the call to the crash record: triton, revision pr-24860, dp 2 with one idle rank.

    python benchmarks/bench_crash_latency.py [--repeats 3] [--backend triton]

Includes starting the rank processes, loading the models, prefill, draft and verify. The goal is
<= 10 s on a 2-core CPU (the real-SGLang replay of the same crash takes 9-13 s a run here).
"""

from __future__ import annotations

import argparse
import statistics
import time

from workbench import reproduce


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backend", default="triton")
    args = ap.parse_args()
    times = []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        res = reproduce(
            backend=args.backend,
            revision="pr-24860",
            dp=2,
            dp_policy="pack",
            prompts=["def f(x):\n"],
            steps=3,
            topk=2,
            draft_tokens=4,
            max_new_tokens=8,
        )
        dt = time.perf_counter() - t0
        times.append(dt)
        c = res.crash or {}
        print(
            f"run {i + 1}: {dt:.2f} s -> {res.status}: rank {c.get('rank')} {c.get('phase')} {c.get('forward_mode')} "
            f"{c.get('exception_type')}: {c.get('message')}"
        )
    print(
        f"call -> crash record: median {statistics.median(times):.2f} s, min {min(times):.2f} s, "
        f"max {max(times):.2f} s over {len(times)} runs ({args.backend}, dp 2, kernel {res.record['config']['kernel']})"
    )


if __name__ == "__main__":
    main()
