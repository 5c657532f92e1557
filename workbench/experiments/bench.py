"""``workbench bench``: plain greedy decoding vs EAGLE3 on the same backend, in paired repeats.

Each repeat runs every (backend, mode) arm once, in an order drawn at random per repeat (seeded),
on the same prompts; tokens/s cover generation only (``setup_s`` apart). The speedup is the
median over repeats of the per-repeat ratio EAGLE3 tokens/s / greedy tokens/s, with its
order-statistic interval and that interval's exact coverage (``stats``); ``lossless``: every
EAGLE3 run generated exactly the greedy tokens. Unless told otherwise it runs the comparison of
``definition.COMPARISON``.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from workbench.experiments.definition import COMPARISON, describe
from workbench.experiments.stats import INTERVAL, fmt, fmt_interval, paired_ratio, records_commit, summarize, verdict
from workbench.models.loader import load_prompts
from workbench.run.api import reproduce
from workbench.run.events import OnEvent
from workbench.run.record import RunRecord, RunResult

MODES = ("greedy", "eagle")
SCHEMA = "workbench.bench/2"


def run_paired(
    config: dict,
    arms: Sequence[tuple[str, dict]],
    repeats: int,
    seed: int = COMPARISON.order_seed,
    run: Callable[[dict], RunResult] | None = None,
    on_event: OnEvent | None = None,
    keep_failed: bool = False,
) -> tuple[dict[str, list[RunResult]], list[list[str]]]:
    """``repeats`` repeats of every arm (label, config overrides), each repeat in a random order
    drawn from ``seed``; ``run`` (default ``reproduce``) runs one config. Returns (runs per label,
    repeat i at index i; the order run per repeat). A run that does not end ok stops everything
    (SystemExit naming it), or with ``keep_failed`` is kept (its arm is not run again: the same
    config fails the same way; its later turns are reported as skipped) while the other arms go
    on. ``on_event`` gets the runs' events (through ``reproduce``) and a ``plan`` / ``run`` event
    per run (``workbench.run.events``)."""
    if run is None:

        def run(cfg: dict) -> RunResult:
            return reproduce(cfg, on_event=on_event)

    rng = random.Random(seed)
    runs: dict[str, list[RunResult]] = {label: [] for label, _ in arms}
    order = []
    if on_event is not None:
        on_event("plan", None, {"runs": repeats * len(arms)})
    failed: set[str] = set()
    for _ in range(repeats):
        this = list(arms)
        rng.shuffle(this)
        order.append([label for label, _ in this if label not in failed])
        for label, overrides in this:
            if label in failed:
                if on_event is not None:
                    on_event("run", None, {"label": label, "status": "skipped"})
                continue
            r = run({**config, **overrides})
            if on_event is not None:
                on_event("run", None, {"label": label, "status": r.status})
            if r.status != "ok":
                print(r.summary())
                if not keep_failed:
                    raise SystemExit(f"{label} run ended {r.status}")
                failed.add(label)
            runs[label].append(r)
    return runs, order


def tokens_per_s(records: Sequence[RunRecord]) -> list[float | None]:
    """Each run's generation tokens/s, in repeat order."""
    return [r.metrics["tokens_per_s"] for r in records]


def eagle_over_greedy(greedy: Sequence[RunRecord], eagle: Sequence[RunRecord]) -> dict:
    """The comparison's verdict on one backend's run records, repeat i of each paired: the paired
    ratio of tokens/s with its interval and verdict, the accept length, the share of greedy outputs
    in a repetition loop and ``lossless`` (every run's outputs equal the first greedy run's)."""
    speedup = paired_ratio(tokens_per_s(eagle), tokens_per_s(greedy))
    return {
        "speedup": speedup,
        "verdict": verdict(speedup),
        "accept_length_mean": eagle[0].metrics["accept_length_mean"],
        "repetition_loop_share": (greedy[0].metrics.get("repetition_loops") or {}).get("share"),
        "lossless": all(r.outputs_sha256 == greedy[0].outputs_sha256 for r in [*eagle, *greedy]),
    }


def round_breakdown(records: list[RunRecord]) -> dict[str, float]:
    """Median ms of each phase of a scheduling round over all runs (``draft`` spans the draft's
    forwards), and the round's total per token where the runs are EAGLE3 runs."""
    phases: dict[str, list[float]] = {}
    for rec in records:
        for k, v in rec.metrics["latency_s"].items():
            phases.setdefault(k, []).extend(v)
    out = {k: 1000 * statistics.median(v) for k, v in phases.items() if v and k != "prefill"}
    accept = [r.metrics["accept_length_mean"] for r in records if r.metrics.get("accept_length_mean")]
    if accept and all(k in out for k in ("draft", "verify")):
        out["round"] = sum(out.get(k, 0.0) for k in ("draft", "verify", "draft-extend"))
        out["round_per_token"] = out["round"] / statistics.median(accept)
    return out


def speedup_row(backend: str, greedy: list[RunRecord], eagle: list[RunRecord]) -> dict:
    """One backend's figures from its greedy and EAGLE3 run records, repeat i of each paired."""
    e0 = eagle[0]
    found = eagle_over_greedy(greedy, eagle)
    return {
        "backend": backend,
        "kernel": e0.config["kernel"],
        "kernel_stand_in": e0.config["kernel_stand_in"],
        "interpreter": e0.env["triton_interpret"],
        "device": e0.env["device"],
        "torch_threads": e0.env.get("torch_threads"),
        "repeats": len(eagle),
        "spec": [e0.config["steps"], e0.config["topk"], e0.config["draft_tokens"]],
        "accept_length_mean": found["accept_length_mean"],
        "acceptance_rate": e0.metrics["acceptance_rate"],
        "acceptance_per_position": e0.metrics.get("acceptance_per_position"),
        "repetition_loop_share": found["repetition_loop_share"],
        "greedy_tokens_per_s": summarize(tokens_per_s(greedy)),
        "eagle_tokens_per_s": summarize(tokens_per_s(eagle)),
        "speedup": found["speedup"],
        "verdict": found["verdict"],
        "interval": INTERVAL,
        "lossless": found["lossless"],
        "setup_s": summarize([r.metrics["setup_s"] for r in eagle + greedy]),
        "eagle_round_ms": round_breakdown(eagle),
        "greedy_round_ms": round_breakdown(greedy),
    }


def _print_row(row: dict) -> None:
    print(
        f"{row['backend']:13s} kernel: {row['kernel']}  (Triton kernels in the interpreter: {row['interpreter']}; "
        f"tensors on {row['device']}, {row['torch_threads']} torch thread(s); (steps, topk, draft tokens) "
        f"{tuple(row['spec'])})"
    )
    loops = row["repetition_loop_share"]
    print(
        f"  accept length {row['accept_length_mean']:.3f}  acceptance rate {row['acceptance_rate']:.3f}  "
        f"greedy outputs ending in a repetition loop {'n/a' if loops is None else f'{100 * loops:.0f} %'}"
    )
    print(
        f"  tokens/s (generation only, median [interval] of {row['repeats']}): greedy "
        f"{fmt(row['greedy_tokens_per_s'])}  eagle3 {fmt(row['eagle_tokens_per_s'])}"
    )
    print(
        f"  speedup (per-repeat EAGLE3/greedy) {fmt_interval(row['speedup'])}: {row['verdict']['text']}; "
        f"outputs identical: {row['lossless']}"
    )
    e, g = row["eagle_round_ms"], row["greedy_round_ms"]
    if "round" in e:
        print(
            f"  one round: draft {e['draft']:.2f} + verify {e['verify']:.2f} + draft-extend "
            f"{e.get('draft-extend', 0.0):.2f} = {e['round']:.2f} ms for {row['accept_length_mean']:.2f} tokens "
            f"({e['round_per_token']:.2f} ms/token) vs a greedy decode {g.get('decode', float('nan')):.2f} ms"
        )
    print(f"  setup (load, warm-up; not in tokens/s) {fmt(row['setup_s'], digits=2)} s")


def bench(
    config: dict,
    backends: list[str],
    repeats: int = COMPARISON.repeats,
    json_out: str | None = None,
    run: Callable[[dict], RunResult] | None = None,
    on_event: OnEvent | None = None,
) -> dict:
    """Greedy and EAGLE3 ``repeats`` times per backend in paired, shuffled repeats; prints and
    returns {"speedup", "verdict", "lossless", "backend"} of the first backend, ``rows`` (one per
    backend) and ``lossless_all``. ``on_event``: progress (``workbench.run.events``)."""
    arms = [(f"{m}/{b}", {"backend": b, "mode": m}) for b in backends for m in MODES]
    runs, order = run_paired(config, arms, repeats, run=run, on_event=on_event)
    line = describe(config, backends, repeats)
    commit = records_commit([r.record for rs in runs.values() for r in rs])
    print(f"compared: {line}")
    print(f"workbench commit: {commit}")
    rows = []
    for b in backends:
        row = speedup_row(b, [r.record for r in runs[f"greedy/{b}"]], [r.record for r in runs[f"eagle/{b}"]])
        rows.append(row)
        _print_row(row)
    out = {
        "schema": SCHEMA,
        "compared": line,
        "backend": rows[0]["backend"],
        "speedup": rows[0]["speedup"],
        "verdict": rows[0]["verdict"],
        "lossless": rows[0]["lossless"],
        "lossless_all": all(r["lossless"] for r in rows),
        "interval": INTERVAL,
        "workbench_commit": commit,
        "config": {k: v for k, v in config.items() if k not in ("prompts", "backend")},
        "num_prompts": len(config["prompts"]) if config.get("prompts") is not None else len(load_prompts()),
        "order": order,
        "rows": rows,
    }
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(out, indent=1))
    return out
