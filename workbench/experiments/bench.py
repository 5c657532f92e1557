"""``workbench bench``: plain greedy decoding vs EAGLE3 on the same backend, repeats interleaved.

Tokens/s cover generation only (``setup_s`` apart); the speedup is median EAGLE3 tokens/s over
median greedy tokens/s with a 95 % bootstrap interval; ``lossless``: every EAGLE3 run generated
exactly the greedy tokens.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from workbench.experiments.stats import INTERVAL, fmt, ratio, summarize
from workbench.run.api import reproduce
from workbench.run.record import RunResult

MODES = ("greedy", "eagle")
SPEC_KEYS = ("steps", "topk", "draft_tokens")
# When no spec setting is given, bench runs the chain that measured fastest at batch 1 on the 2-core
# CPU box (docs/guide.md, "Choosing the spec setting"): on a CPU every verified token and every extra
# branch costs compute, unlike on a GPU, where SGLang's auto choice for Llama is (5, 4, 8).
BENCH_SPEC = {"steps": 5, "topk": 1, "draft_tokens": 6}


def with_bench_spec(config: dict) -> dict:
    """``config`` with bench's default spec setting unless it names any of steps/topk/draft_tokens."""
    if any(config.get(k) is not None for k in SPEC_KEYS):
        return config
    return {**config, **BENCH_SPEC}


def _phase_table(records: list[dict]) -> str:
    phases: dict[str, list[float]] = {}
    for rec in records:
        for k, v in rec["metrics"]["latency_s"].items():
            phases.setdefault(k, []).extend(v)
    return ", ".join(f"{k} {1000 * statistics.median(v):.1f} ms (n={len(v)})" for k, v in phases.items() if v)


def run_interleaved(config: dict, backends: list[str], repeats: int, modes=MODES) -> dict[str, list[RunResult]]:
    """``repeats`` rounds of every backend × mode, round by round so machine noise spreads evenly.
    Keys ``"<mode>/<backend>"``; a run that does not end ok stops everything (SystemExit)."""
    runs: dict[str, list[RunResult]] = {f"{m}/{b}": [] for b in backends for m in modes}
    for _ in range(repeats):
        for b in backends:
            for m in modes:
                r = reproduce({**config, "backend": b, "mode": m})
                if r.status != "ok":
                    print(r.summary())
                    raise SystemExit(f"{b} {m} run ended {r.status}")
                runs[f"{m}/{b}"].append(r)
    return runs


def speedup_row(backend: str, greedy: list[dict], eagle: list[dict]) -> dict:
    """One backend's figures from its greedy and EAGLE3 run records."""
    tps = lambda recs: [r["metrics"]["tokens_per_s"] for r in recs]  # noqa: E731
    e0 = eagle[0]
    return {
        "backend": backend,
        "kernel": e0["config"]["kernel"],
        "kernel_stand_in": e0["config"]["kernel_stand_in"],
        "interpreter": e0["env"]["triton_interpret"],
        "device": e0["env"]["device"],
        "torch_threads": e0["env"].get("torch_threads"),
        "repeats": len(eagle),
        "spec": [e0["config"]["steps"], e0["config"]["topk"], e0["config"]["draft_tokens"]],
        "accept_length_mean": e0["metrics"]["accept_length_mean"],
        "acceptance_rate": e0["metrics"]["acceptance_rate"],
        "greedy_tokens_per_s": summarize(tps(greedy)),
        "eagle_tokens_per_s": summarize(tps(eagle)),
        "speedup": ratio(tps(eagle), tps(greedy)),
        "interval": INTERVAL,
        "lossless": all(r["outputs_sha256"] == greedy[0]["outputs_sha256"] for r in eagle + greedy),
        "setup_s": summarize([r["metrics"]["setup_s"] for r in eagle + greedy]),
        "eagle_phases_ms": _phase_table(eagle),
        "greedy_phases_ms": _phase_table(greedy),
    }


def bench(config: dict, backends: list[str], repeats: int = 5, json_out: str | None = None) -> dict:
    """Runs greedy and EAGLE3 ``repeats`` times per backend (interleaved); prints and returns
    {"speedup", "lossless", "backend"} of the first backend plus ``rows`` (one per backend)."""
    runs = run_interleaved(config, backends, repeats)
    rows = []
    for b in backends:
        row = speedup_row(b, [r.record for r in runs[f"greedy/{b}"]], [r.record for r in runs[f"eagle/{b}"]])
        rows.append(row)
        print(
            f"{b:13s} kernel: {row['kernel']}  (Triton kernels in the interpreter: {row['interpreter']}; "
            f"tensors on {row['device']}, {row['torch_threads']} torch thread(s); (steps, topk, draft tokens) "
            f"{tuple(row['spec'])})"
        )
        print(f"  accept length {row['accept_length_mean']:.3f}  acceptance rate {row['acceptance_rate']:.3f}")
        print(
            f"  tokens/s (generation only, median [95 % interval] of {repeats}): "
            f"greedy {fmt(row['greedy_tokens_per_s'])}"
            f"  eagle3 {fmt(row['eagle_tokens_per_s'])}  speedup {fmt(row['speedup'], digits=2)}x"
            f"  outputs identical: {row['lossless']}"
        )
        print(f"  setup (load, warm-up; not in tokens/s) {fmt(row['setup_s'], digits=2)} s")
        print(f"  eagle3 phases: {row['eagle_phases_ms']}")
        print(f"  greedy phases: {row['greedy_phases_ms']}")
    out = {
        "backend": rows[0]["backend"],
        "speedup": rows[0]["speedup"],
        "lossless": rows[0]["lossless"],
        "config": {k: v for k, v in config.items() if k not in ("prompts", "backend")},
        "rows": rows,
    }
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(out, indent=1))
    return out
