"""``workbench compare``: every backend × mode (× dp) in paired repeats (each repeat runs every arm
once, in a random order); medians with order-statistic intervals of every figure, and verdicts from
paired ratios: EAGLE3 over greedy per backend, each backend against each other, dp N against dp 1.

Per run, a figure is reduced to one number (tokens/s; the median of a phase's or a forward's
samples); across repeats it is the median with its interval and that interval's exact coverage.
Two arms are compared by their ratio within each repeat (``stats.paired_ratio``), which is
"faster" / "slower" when its interval excludes 1 and otherwise undecided, with the repeats that
would decide it. Unless told otherwise it runs the comparison of ``definition.COMPARISON``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from workbench.experiments.bench import MODES, eagle_over_greedy, run_paired, tokens_per_s
from workbench.experiments.definition import COMPARISON, describe
from workbench.experiments.stats import INTERVAL, fmt, fmt_interval, paired_ratio, records_commit, summarize, verdict
from workbench.run.events import OnEvent
from workbench.run.labels import record_label
from workbench.run.record import RunRecord, RunResult

SCHEMA = "workbench.compare/2"  # a format name (not a module path)
NOTE = (
    "Timing covers generation only (first prefill to last token); setup_s (model load, rank start, warm-up) "
    "is apart. flashinfer and fa3 compute with torch stand-ins of their kernels (on every machine) and Triton "
    "runs in its interpreter on CPU: latency compares code paths on this machine, not GPU kernels."
)


def _per_run(records: Iterable[RunRecord], kind: str, key: str, reduce=statistics.median) -> list[float]:
    out = []
    for rec in records:
        v = (rec.metrics.get(kind) or {}).get(key)
        if v:
            out.append(reduce(v))
    return out


def _keys(records: Sequence[RunRecord], kind: str) -> list[str]:
    seen: dict[str, None] = {}
    for rec in records:
        for k in rec.metrics.get(kind) or {}:
            seen.setdefault(k)
    return list(seen)


def summarize_runs(records: Sequence[RunRecord]) -> dict:
    """Figures of one backend × mode × dp over its repeats (all ok run records of the same config)."""
    m = lambda name: [r.metrics[name] for r in records]  # noqa: E731
    first = records[0]
    fwd_keys = _keys(records, "forward_s")
    attention_share = []
    for rec in records:
        fwd, att = rec.metrics["forward_s"], rec.metrics["attention_s"]
        total = sum(sum(v) for v in fwd.values())
        if total:
            attention_share.append(sum(sum(att.get(k, [])) for k in fwd) / total)
    collective = _per_run(records, "collective_s", "forward/busy")
    forward_total = [sum(sum(v) for v in r.metrics["forward_s"].values()) for r in records]
    collective_total = _per_run(records, "collective_s", "forward/busy", reduce=sum)
    return {
        "backend": first.config["backend"],
        "label": record_label(first, sep=" "),
        "kernel": first.config["kernel"],
        "kernel_stand_in": first.config["kernel_stand_in"],
        "mode": first.config["mode"],
        "dp": first.config["dp"],
        "device": first.env["device"],
        "dtype": first.config.get("dtype"),
        "torch_threads_per_rank": first.env.get("torch_threads"),
        "repeats": len(records),
        "outputs_sha256": sorted({r.outputs_sha256 for r in records}),
        "tokens_per_s": summarize(m("tokens_per_s")),
        "tokens_per_s_values": m("tokens_per_s"),
        "generation_s": summarize(m("generation_s")),
        "setup_s": summarize(m("setup_s")),
        "tokens_generated": first.metrics["tokens_generated"],
        "accept_length_mean": summarize(m("accept_length_mean")),
        "phase_ms": {
            p: summarize([1000 * v for v in _per_run(records, "latency_s", p)]) for p in _keys(records, "latency_s")
        },
        "forward_ms": {k: summarize([1000 * v for v in _per_run(records, "forward_s", k)]) for k in fwd_keys},
        "forwards_per_run": {
            k: statistics.median(len(r.metrics["forward_s"].get(k, [])) for r in records) for k in fwd_keys
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


def pairs(records: dict[str, list[RunRecord]], rows: list[dict]) -> list[dict]:
    """Every two backends of the same mode and dp: tokens/s of a over b per repeat, and the verdict."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if (a["mode"], a["dp"]) != (b["mode"], b["dp"]):
                continue
            if a["arm"] not in records or b["arm"] not in records:  # an arm that failed in some repeat
                continue
            r = paired_ratio(tokens_per_s(records[a["arm"]]), tokens_per_s(records[b["arm"]]))
            out.append(
                {
                    "mode": a["mode"],
                    "dp": a["dp"],
                    "a": a["label"],
                    "b": b["label"],
                    "figure": "tokens_per_s",
                    "a_value": fmt(a["tokens_per_s"]),
                    "b_value": fmt(b["tokens_per_s"]),
                    "ratio": r,
                    "verdict": verdict(r),
                }
            )
    return out


def dp_cost(records: dict[str, list[RunRecord]], rows: list[dict]) -> list[dict]:
    """Per backend × mode: tokens/s at each dp > 1 against dp 1 (paired per repeat), and the DP
    collectives per forward."""
    by = {(r["backend"], r["mode"], r["dp"]): r for r in rows}
    out = []
    for (b, mode, dp), r in by.items():
        base = by.get((b, mode, 1))
        if dp == 1 or base is None or r["arm"] not in records or base["arm"] not in records:
            continue
        ratio = paired_ratio(tokens_per_s(records[r["arm"]]), tokens_per_s(records[base["arm"]]))
        forwards = sum(r["forwards_per_run"].values())
        out.append(
            {
                "backend": b,
                "mode": mode,
                "dp": dp,
                "tokens_per_s_dp1": fmt(base["tokens_per_s"]),
                f"tokens_per_s_dp{dp}": fmt(r["tokens_per_s"]),
                "ratio": ratio,
                "verdict": verdict(ratio),
                "collective_ms_per_forward": fmt(r["collective_ms_per_forward"], digits=2),
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


def speedups(records: dict[str, list[RunRecord]], backends: Sequence[str], dps: Sequence[int]) -> list[dict]:
    """EAGLE3 over greedy per backend and dp: the paired ratio of tokens/s, its verdict, losslessness."""
    out = []
    for dp in dps:
        for b in backends:
            g, e = records.get(f"greedy/{b}/dp{dp}"), records.get(f"eagle/{b}/dp{dp}")
            if not g or not e:
                continue
            out.append({"backend": b, "label": record_label(e[0], sep=" "), "dp": dp, **eagle_over_greedy(g, e)})
    return out


def _verdict_word(v: dict) -> str:
    """``faster`` / ``slower``; an undecided verdict with the repeats in all that would decide it, or
    why no number of repeats would."""
    if v["verdict"] != "undecided":
        return v["verdict"]
    if v.get("repeats_needed") is None:
        return "undecided (repeats split evenly around 1)"
    return f"undecided (about {v['repeats_needed']} repeats in all would decide)"


def headline(doc: dict) -> str:
    """One line: what was compared and what it found (EAGLE3 vs greedy per backend and dp; the
    accept length, and the share of greedy outputs ending in a repetition loop, where acceptance is cheap)."""
    found = "; ".join(
        f"{s['label']} dp{s['dp']} {fmt(s['speedup'], digits=2)}x {_verdict_word(s['verdict'])}"
        + ("" if s["lossless"] else " (OUTPUTS DIFFER FROM GREEDY)")
        for s in doc["speedup"]
    )
    first = doc["speedup"][0] if doc["speedup"] else {}
    loops = first.get("repetition_loop_share")
    extra = (
        f" Accept length {first['accept_length_mean']:.2f}; greedy outputs ending in a repetition loop: "
        f"{'n/a' if loops is None else f'{100 * loops:.0f} %'}."
        if first.get("accept_length_mean") is not None
        else ""
    )
    return f"Compared {doc['compared']}. Found EAGLE3/greedy: {found or 'no pair of greedy and EAGLE3 runs'}.{extra}"


def failed_row(rec: RunRecord) -> dict:
    """A run that did not end ok, as a row: its backend, mode and dp, and how it ended."""
    crash = rec.crash
    return {
        "backend": rec.config["backend"],
        "label": record_label(rec, sep=" "),
        "kernel": rec.config["kernel"],
        "mode": rec.config["mode"],
        "dp": rec.config["dp"],
        "status": rec.status,
        "exception": f"{crash.exception_type}: {crash.message}" if crash else None,
        "phase": crash.phase if crash else None,
        "rank": crash.rank if crash else None,
    }


def compare(
    config: dict,
    backends: Sequence[str],
    repeats: int = COMPARISON.repeats,
    dps: Sequence[int] = (1,),
    modes: Sequence[str] = MODES,
    json_out: str | None = None,
    verbose: bool = True,
    records_out: dict | None = None,
    run: Callable[[dict], RunResult] | None = None,
    on_event: OnEvent | None = None,
) -> dict:
    """Run and summarise; returns (and writes to ``json_out``) the comparison document.
    ``records_out``, given a dict, receives every run record keyed ``<mode>/<backend>/dp<N>#<repeat>``;
    ``run`` replaces ``reproduce`` (tests); ``on_event``: progress (``workbench.run.events``). A run
    that does not end ok is kept as a ``failed`` row (its arm is not run again); the rest is
    summarised and shown, and only arms ok in every repeat enter the paired ratios."""
    if repeats < 2:
        raise ValueError(f"invalid repeats {repeats!r}; valid: an integer >= 2 (an interval needs repeats)")
    arms = [(f"{m}/{b}/dp{dp}", {"backend": b, "mode": m, "dp": dp}) for dp in dps for b in backends for m in modes]
    runs, order = run_paired(config, arms, repeats, run=run, on_event=on_event, keep_failed=True)
    if records_out is not None:
        records_out.update({f"{arm}#{i}": r.record for arm, rs in runs.items() for i, r in enumerate(rs)})
    failed = [failed_row(r.record) for rs in runs.values() for r in rs if r.status != "ok"]
    records = {arm: [r.record for r in rs if r.status == "ok"] for arm, rs in runs.items()}
    rows = [{**summarize_runs(recs), "arm": arm} for arm, recs in records.items() if recs]
    paired = {arm: recs for arm, recs in records.items() if len(recs) == repeats}  # ok in every repeat
    doc = {
        "schema": SCHEMA,
        "compared": describe({**config, "dp": "/".join(map(str, dps))}, list(backends), repeats),
        "config": {k: v for k, v in config.items() if k != "backend"},
        "backends": list(backends),
        "dps": list(dps),
        "repeats": repeats,
        "order": order,
        "interval": INTERVAL,
        "workbench_commit": records_commit([r.record for rs in runs.values() for r in rs]),
        "note": NOTE,
        "rows": rows,
        "failed": failed,
        "speedup": speedups(paired, backends, dps),
        "pairs": pairs(paired, rows),
        "dp_cost": dp_cost(paired, rows),
    }
    doc["headline"] = headline(doc)
    if verbose:
        print(format_text(doc))
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(doc, indent=1))
    return doc


def format_text(doc: dict) -> str:
    """The comparison as plain text: the headline, figures per row, speedups, verdicts."""
    lines = [doc["headline"], doc["note"], f"intervals: {doc['interval']}", ""]
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
    for f in doc.get("failed", []):
        lines.append(f"{f['label']:32s} {f['mode']:6s} dp{f['dp']}  FAILED: {f['status']} {f['exception'] or ''}")
    lines.append("")
    for s in doc["speedup"]:
        lines.append(
            f"EAGLE3 / greedy  {s['label']:32s} dp{s['dp']}  {fmt_interval(s['speedup'])}x: "
            f"{s['verdict']['text']}; outputs identical: {s['lossless']}"
        )
    for d in doc["dp_cost"]:
        n = d["dp"]
        lines.append(
            f"dp{n} vs dp1  {d['backend']} {d['mode']}: tokens/s {d['tokens_per_s_dp1']} -> "
            f"{d[f'tokens_per_s_dp{n}']}, ratio {fmt_interval(d['ratio'])}: {d['verdict']['text']}; generation "
            f"{d['generation_s_dp1']} -> {d[f'generation_s_dp{n}']} s; forwards {d['forward_s_dp1']} s -> "
            f"{d[f'forward_s_dp{n}_all_ranks']} s over all ranks, of which DP collectives "
            f"{d[f'collective_s_dp{n}_all_ranks']} s ({d['collective_ms_per_forward']} ms per forward); setup "
            f"{d['setup_s_dp1']} -> {d[f'setup_s_dp{n}']} s (not in tokens/s)"
        )
    for p in doc["pairs"]:
        lines.append(
            f"{p['a']} / {p['b']} ({p['mode']}, dp{p['dp']}) tokens/s: {fmt_interval(p['ratio'])}: "
            f"{p['verdict']['text']}"
        )
    return "\n".join(lines)
