"""``workbench compare``: every backend × mode (× dp) run N times, interleaved; medians with 95 %
bootstrap intervals of every figure, EAGLE3-over-greedy speedups, and which differences are real.

Per run, a figure is reduced to one number (tokens/s; the median of a phase's or a forward's
samples); across repeats it is reported as the median with a bootstrap interval. Two figures
whose intervals overlap are reported as "not different".
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from workbench.experiments.bench import MODES, run_interleaved
from workbench.experiments.stats import INTERVAL, different, fmt, ratio, summarize
from workbench.views.plots.common import record_label

SCHEMA = "workbench.compare/1"  # a format name (not a module path)
NOTE = (
    "Timing covers generation only (first prefill to last token); setup_s (model load, rank start, warm-up) "
    "is apart. flashinfer and fa3 compute with torch stand-ins and Triton runs in its interpreter on a "
    "machine without a GPU: latency compares code paths on this machine, not GPU kernels."
)


def _per_run(records: Iterable[dict], kind: str, key: str, reduce=statistics.median) -> list[float]:
    out = []
    for rec in records:
        v = (rec["metrics"].get(kind) or {}).get(key)
        if v:
            out.append(reduce(v))
    return out


def _keys(records: Sequence[dict], kind: str) -> list[str]:
    seen: dict[str, None] = {}
    for rec in records:
        for k in rec["metrics"].get(kind) or {}:
            seen.setdefault(k)
    return list(seen)


def summarize_runs(records: Sequence[dict]) -> dict:
    """Figures of one backend × mode × dp over its repeats (all ok run records of the same config)."""
    m = lambda name: [r["metrics"][name] for r in records]  # noqa: E731
    first = records[0]
    fwd_keys = _keys(records, "forward_s")
    attention_share = []
    for rec in records:
        fwd, att = rec["metrics"]["forward_s"], rec["metrics"]["attention_s"]
        total = sum(sum(v) for v in fwd.values())
        if total:
            attention_share.append(sum(sum(att.get(k, [])) for k in fwd) / total)
    collective = _per_run(records, "collective_s", "forward/busy")
    forward_total = [sum(sum(v) for v in r["metrics"]["forward_s"].values()) for r in records]
    collective_total = _per_run(records, "collective_s", "forward/busy", reduce=sum)
    return {
        "backend": first["config"]["backend"],
        "label": record_label(first, sep=" "),
        "kernel": first["config"]["kernel"],
        "kernel_stand_in": first["config"]["kernel_stand_in"],
        "mode": first["config"]["mode"],
        "dp": first["config"]["dp"],
        "device": first["env"]["device"],
        "dtype": first["config"].get("dtype"),
        "torch_threads_per_rank": first["env"].get("torch_threads"),
        "repeats": len(records),
        "outputs_sha256": sorted({r["outputs_sha256"] for r in records}),
        "tokens_per_s": summarize(m("tokens_per_s")),
        "tokens_per_s_values": m("tokens_per_s"),
        "generation_s": summarize(m("generation_s")),
        "setup_s": summarize(m("setup_s")),
        "tokens_generated": first["metrics"]["tokens_generated"],
        "accept_length_mean": summarize(m("accept_length_mean")),
        "phase_ms": {
            p: summarize([1000 * v for v in _per_run(records, "latency_s", p)]) for p in _keys(records, "latency_s")
        },
        "forward_ms": {k: summarize([1000 * v for v in _per_run(records, "forward_s", k)]) for k in fwd_keys},
        "forwards_per_run": {
            k: statistics.median(len(r["metrics"]["forward_s"].get(k, [])) for r in records) for k in fwd_keys
        },
        "metadata_ms": {
            k: summarize([1000 * v for v in _per_run(records, "metadata_s", k)]) for k in _keys(records, "metadata_s")
        },
        "attention_ms": {k: summarize([1000 * v for v in _per_run(records, "attention_s", k)]) for k in fwd_keys},
        "attention_share": summarize(attention_share),
        "collective_ms_per_forward": summarize([1000 * v for v in collective]) if collective else None,
        "forward_s_per_run": summarize(forward_total),  # all busy forwards of a run (per rank under DP, summed)
        "collective_s_per_run": summarize(collective_total) if collective_total else None,
    }


def _verdict(a: dict | None, b: dict | None) -> str:
    d = different(a, b)
    return "n/a" if d is None else ("different" if d else "not different")


def pairs(rows: list[dict], figure: str = "tokens_per_s") -> list[dict]:
    """Every two rows of the same mode and dp: their figures and whether they differ."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if (a["mode"], a["dp"]) == (b["mode"], b["dp"]):
                out.append(
                    {
                        "mode": a["mode"],
                        "dp": a["dp"],
                        "a": a["label"],
                        "b": b["label"],
                        "figure": figure,
                        "a_value": fmt(a[figure]),
                        "b_value": fmt(b[figure]),
                        "verdict": _verdict(a[figure], b[figure]),
                    }
                )
    return out


def dp_cost(rows: list[dict]) -> list[dict]:
    """Per backend × mode: tokens/s at each dp > 1 next to dp 1, and the DP collectives per forward."""
    by = {(r["backend"], r["mode"], r["dp"]): r for r in rows}
    out = []
    for (b, mode, dp), r in by.items():
        base = by.get((b, mode, 1))
        if dp == 1 or base is None:
            continue
        forwards = sum(r["forwards_per_run"].values())
        coll = r["collective_ms_per_forward"]
        out.append(
            {
                "backend": b,
                "mode": mode,
                "dp": dp,
                "tokens_per_s_dp1": fmt(base["tokens_per_s"]),
                f"tokens_per_s_dp{dp}": fmt(r["tokens_per_s"]),
                "verdict": _verdict(base["tokens_per_s"], r["tokens_per_s"]),
                "collective_ms_per_forward": fmt(coll, digits=2),
                "forwards_per_rank": forwards / dp,
                "forward_s_dp1": fmt(base["forward_s_per_run"], digits=2),
                f"forward_s_dp{dp}_all_ranks": fmt(r["forward_s_per_run"], digits=2),
                f"collective_s_dp{dp}_all_ranks": fmt(r["collective_s_per_run"], digits=2),
                "generation_s_dp1": fmt(base["generation_s"], digits=2),
                f"generation_s_dp{dp}": fmt(r["generation_s"], digits=2),
                "setup_s_dp1": fmt(base["setup_s"], digits=2),
                f"setup_s_dp{dp}": fmt(r["setup_s"], digits=2),
            }
        )
    return out


def compare(
    config: dict,
    backends: Sequence[str],
    repeats: int = 5,
    dps: Sequence[int] = (1,),
    modes: Sequence[str] = MODES,
    json_out: str | None = None,
    verbose: bool = True,
    records_out: dict | None = None,
) -> dict:
    """Run and summarise; returns (and writes to ``json_out``) the comparison document.
    ``records_out``, given a dict, receives every run record keyed ``<mode>/<backend>/dp<N>#<repeat>``."""
    if repeats < 2:
        raise ValueError(f"invalid repeats {repeats!r}; valid: an integer >= 2 (an interval needs repeats)")
    rows, speedups, records = [], [], {}
    for dp in dps:
        runs = run_interleaved({**config, "dp": dp}, list(backends), repeats, modes)
        for key, rs in runs.items():
            records[f"{key}/dp{dp}"] = [r.record for r in rs]
            if records_out is not None:
                records_out.update({f"{key}/dp{dp}#{i}": r.record for i, r in enumerate(rs)})
            rows.append(summarize_runs(records[f"{key}/dp{dp}"]))
        if {"greedy", "eagle"} <= set(modes):
            for b in backends:
                g, e = records[f"greedy/{b}/dp{dp}"], records[f"eagle/{b}/dp{dp}"]
                tps = lambda recs: [r["metrics"]["tokens_per_s"] for r in recs]  # noqa: E731
                speedups.append(
                    {
                        "backend": b,
                        "label": record_label(e[0], sep=" "),
                        "dp": dp,
                        "speedup": ratio(tps(e), tps(g)),
                        "lossless": all(r["outputs_sha256"] == g[0]["outputs_sha256"] for r in e + g),
                    }
                )
    doc = {
        "schema": SCHEMA,
        "config": {k: v for k, v in config.items() if k != "backend"},
        "backends": list(backends),
        "dps": list(dps),
        "repeats": repeats,
        "interval": INTERVAL,
        "note": NOTE,
        "rows": rows,
        "speedup": speedups,
        "pairs": pairs(rows),
        "dp_cost": dp_cost(rows),
    }
    if verbose:
        print(format_text(doc))
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(doc, indent=1))
    return doc


def format_text(doc: dict) -> str:
    """The comparison as plain text: figures per row, speedups, metadata cost, verdicts."""
    lines = [doc["note"], f"median [95 % interval] over {doc['repeats']} interleaved repeats", ""]
    for r in doc["rows"]:
        lines.append(
            f"{r['label']:32s} {r['mode']:6s} dp{r['dp']}  tokens/s {fmt(r['tokens_per_s'])}  "
            f"generation {fmt(r['generation_s'], digits=2)} s  setup {fmt(r['setup_s'], digits=2)} s  "
            f"attention share {fmt(r['attention_share'], 100, 0)} %"
        )
        lines.append("    phases ms: " + ", ".join(f"{p} {fmt(s, digits=2)}" for p, s in r["phase_ms"].items()))
        lines.append(
            "    init_forward_metadata ms: " + ", ".join(f"{k} {fmt(s, digits=3)}" for k, s in r["metadata_ms"].items())
        )
        if r["collective_ms_per_forward"]:
            lines.append(f"    DP collectives per forward ms: {fmt(r['collective_ms_per_forward'], digits=2)}")
    lines.append("")
    for s in doc["speedup"]:
        lines.append(
            f"speedup EAGLE3 / greedy  {s['label']:32s} dp{s['dp']}  {fmt(s['speedup'], digits=2)}x  "
            f"outputs identical: {s['lossless']}"
        )
    for d in doc["dp_cost"]:
        n = d["dp"]
        at_dp = d[f"tokens_per_s_dp{n}"]
        lines.append(
            f"dp{d['dp']} vs dp1  {d['backend']} {d['mode']}: tokens/s {d['tokens_per_s_dp1']} -> "
            f"{at_dp} ({d['verdict']}); generation {d['generation_s_dp1']} -> {d[f'generation_s_dp{n}']} s; "
            f"forwards {d['forward_s_dp1']} s -> {d[f'forward_s_dp{n}_all_ranks']} s over all ranks, "
            f"of which DP collectives {d[f'collective_s_dp{n}_all_ranks']} s "
            f"({d['collective_ms_per_forward']} ms per forward); setup {d['setup_s_dp1']} -> "
            f"{d[f'setup_s_dp{n}']} s (not in tokens/s)"
        )
    same = [p for p in doc["pairs"] if p["verdict"] == "not different"]
    lines.append(
        "tokens/s pairs not different (intervals overlap): "
        + ("; ".join(f"{p['a']} ~ {p['b']} ({p['mode']}, dp{p['dp']})" for p in same) or "none")
    )
    return "\n".join(lines)
