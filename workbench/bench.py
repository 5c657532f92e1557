"""``workbench bench``: plain greedy decoding vs EAGLE3 on the same backend, per-phase latency."""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import List, Optional

from workbench.api import reproduce


def _phase_table(rec: dict) -> str:
    lat = rec["metrics"]["latency_s"]
    return ", ".join(f"{k} {1000 * statistics.median(v):.1f} ms (n={len(v)})" for k, v in lat.items() if v)


def bench(config: dict, backends: List[str], repeats: int = 1, json_out: Optional[str] = None) -> List[dict]:
    """Runs greedy and EAGLE3 ``repeats`` times per backend; prints and returns one row per backend."""
    rows = []
    for backend in backends:
        best = {}
        for mode in ("greedy", "eagle"):
            runs = [reproduce({**config, "backend": backend, "mode": mode}) for _ in range(repeats)]
            bad = [r for r in runs if r.status != "ok"]
            if bad:
                print(bad[0].summary())
                raise SystemExit(f"bench: {backend} {mode} run ended {bad[0].status}")
            best[mode] = max(runs, key=lambda r: r.metrics["tokens_per_s"]).record
        g, e = best["greedy"], best["eagle"]
        row = {
            "backend": backend, "kernel": e["config"]["kernel"], "interpreter": e["env"]["triton_interpret"],
            "accept_length_mean": e["metrics"]["accept_length_mean"], "acceptance_rate": e["metrics"]["acceptance_rate"],
            "greedy_tokens_per_s": g["metrics"]["tokens_per_s"], "eagle_tokens_per_s": e["metrics"]["tokens_per_s"],
            "speedup": e["metrics"]["tokens_per_s"] / g["metrics"]["tokens_per_s"],
            "lossless": g["outputs_sha256"] == e["outputs_sha256"],
            "eagle_phases": e["metrics"]["latency_s"], "greedy_phases": g["metrics"]["latency_s"],
        }
        rows.append(row)
        print(f"{backend:13s} kernel: {row['kernel']}  (Triton kernels in the interpreter: {row['interpreter']})")
        print(f"  accept length {row['accept_length_mean']:.3f}  acceptance rate {row['acceptance_rate']:.3f}")
        print(f"  greedy {row['greedy_tokens_per_s']:.1f} tok/s  eagle3 {row['eagle_tokens_per_s']:.1f} tok/s  "
              f"speedup {row['speedup']:.2f}x  outputs identical: {row['lossless']}")
        print(f"  eagle3 phases: {_phase_table(e)}")
        print(f"  greedy phases: {_phase_table(g)}")
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
    return rows
