"""Tables of a comparison and of an acceptance sweep (notebook 03), and the nightly report's
section built from them. Every row names the backend with its kernel, stand-ins included."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from workbench.experiments.stats import fmt, fmt_interval
from workbench.experiments.sweep import groups, load_shipped, provenance
from workbench.views import plots
from workbench.views.tables import Table


def compare_table(doc: dict) -> Table:
    """One row per backend × mode × dp: tokens/s, generation and setup time, attention share, verdict columns;
    a config whose run failed is a row saying how it ended."""
    rows = []
    for r in doc["rows"]:
        rows.append(
            {
                "backend (kernel)": f"{r['label']}: {r['kernel']}",
                "mode": r["mode"],
                "dp": r["dp"],
                "status": f"ok ({r['repeats']} runs)",
                "device": r["device"],
                "threads per rank": r.get("torch_threads_per_rank"),
                "tokens/s": fmt(r["tokens_per_s"]),
                "generation s": fmt(r["generation_s"], digits=2),
                "setup s (not in tokens/s)": fmt(r["setup_s"], digits=2),
                "attention % of forward": fmt(r["attention_share"], 100, 0),
                "DP collectives ms/forward": fmt(r["collective_ms_per_forward"], digits=2)
                if r["collective_ms_per_forward"]
                else "",
                "accept length": fmt(r["accept_length_mean"], digits=2) if r["mode"] == "eagle" else "",
            }
        )
    for f in doc.get("failed", []):
        status = f"{f['status']}" + (
            f" on rank {f['rank']} in {f['phase']}: {f['exception']}" if f["exception"] else ""
        )
        rows.append(
            {"backend (kernel)": f"{f['label']}: {f['kernel']}", "mode": f["mode"], "dp": f["dp"], "status": status}
        )
    return Table(rows)


def speedup_table(doc: dict) -> Table:
    """EAGLE3 over greedy per backend and dp: the paired ratio with its interval and coverage, the verdict."""
    return Table(
        [
            {
                "backend": s["label"],
                "dp": s["dp"],
                "accept length": None if s.get("accept_length_mean") is None else f"{s['accept_length_mean']:.2f}",
                "greedy outputs in a repetition loop": None
                if s.get("repetition_loop_share") is None
                else f"{100 * s['repetition_loop_share']:.0f} %",
                "EAGLE3 / greedy tokens/s (per-repeat ratio)": fmt_interval(s["speedup"]),
                "verdict": s["verdict"]["text"],
                "outputs identical": s["lossless"],
            }
            for s in doc["speedup"]
        ]
    )


def metadata_table(doc: dict, mode: str = "eagle") -> Table:
    """init_forward_metadata ms per call: one row per backend (and dp), one column per model/forward mode."""
    rows = [r for r in doc["rows"] if r["mode"] == mode]
    keys = list(dict.fromkeys(k for r in rows for k in r["metadata_ms"]))
    return Table(
        [
            {"backend": r["label"], "dp": r["dp"], **{k: fmt(r["metadata_ms"].get(k), digits=3) for k in keys}}
            for r in rows
        ]
    )


def verdicts(doc: dict) -> list[str]:
    """Plain lines: each backend against each other, and DP against dp 1 (paired ratios, verdicts)."""
    lines = [
        f"{p['a']} / {p['b']} ({p['mode']}, dp {p['dp']}): {p['a_value']} vs {p['b_value']} tokens/s, ratio "
        f"{fmt_interval(p['ratio'])}: {p['a']} {p['verdict']['text']}"
        for p in doc["pairs"]
    ]
    for d in doc["dp_cost"]:
        n = d["dp"]
        at = d[f"tokens_per_s_dp{n}"]
        lines.append(
            f"dp {d['dp']} vs dp 1, {d['backend']} {d['mode']}: {d['tokens_per_s_dp1']} -> {at} tokens/s, ratio "
            f"{fmt_interval(d['ratio'])}: {d['verdict']['text']}; forwards {d['forward_s_dp1']} s -> "
            f"{d[f'forward_s_dp{n}_all_ranks']} s (all ranks), of which DP collectives "
            f"{d[f'collective_s_dp{n}_all_ranks']} s, {d['collective_ms_per_forward']} ms per forward"
        )
    return lines


def sweep_table(doc: dict) -> Table:
    """One row per dtype × setting × group of backends with identical results."""
    rows = []
    for g in groups(doc["rows"]):
        a = g["agreement_with_fp32_greedy"] or {}
        pos = g["acceptance_per_position"] or []
        rows.append(
            {
                "dtype": g["dtype"],
                "steps, topk, draft tokens": tuple(g["setting"]),
                "backends (identical results)": " = ".join(g["labels"]),
                "status": g["status"],
                "accept length": None if g["accept_length_mean"] is None else f"{g['accept_length_mean']:.2f}",
                "acceptance rate": None if g["acceptance_rate"] is None else f"{g['acceptance_rate']:.3f}",
                "acceptance per position": " ".join(f"{p:.2f}" for p in pos if p is not None),
                "= fp32 greedy (prompts)": f"{a.get('identical_prompts')}/{a.get('prompts')}" if a else None,
                "prefix agreement": None if a.get("prefix_share") is None else f"{a['prefix_share']:.3f}",
            }
        )
    return Table(rows)


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'>"


def headlines(cells: list[dict]) -> list[str]:
    """``cell: <what was compared and what it found>`` for every cell that ran a comparison."""
    return [
        f"{c['name']}: {(c.get('notebook_record') or {})['compare']['headline']}"
        for c in cells
        if ((c.get("notebook_record") or {}).get("compare") or {}).get("headline")
    ]


def comparison_section(cells: list[dict], folder: Path, shipped_sweep: dict | None = None) -> str:
    """HTML for the nightly report: each cell's comparison (tables, spread and metadata plots) and
    acceptance sweep (live, and the shipped full measurement labelled with its date and versions)."""
    parts = []
    folder.mkdir(parents=True, exist_ok=True)
    for c in cells:
        nb_record = c.get("notebook_record") or {}
        name = c["name"].replace("/", "_")
        if nb_record.get("compare"):
            doc = nb_record["compare"]
            plots.speedup_intervals(doc, folder / f"{name}_speedup")
            plots.tokens_per_s_spread(doc, folder / f"{name}_tokens_per_s")
            plots.metadata_cost(doc, folder / f"{name}_metadata")
            parts.append(
                f"<h3>{html.escape(c['name'])}: backends compared ({doc['repeats']} paired repeats in random "
                f"order)</h3><p><b>{html.escape(doc['headline'])}</b></p><p>{html.escape(doc['note'])} "
                f"Intervals: {html.escape(doc['interval'])}.</p>"
                f"{speedup_table(doc)._repr_html_()}{compare_table(doc)._repr_html_()}"
                f"<h4>init_forward_metadata, ms per call</h4>{metadata_table(doc)._repr_html_()}"
                f"<ul>{''.join(f'<li>{html.escape(v)}</li>' for v in verdicts(doc))}</ul>"
                f"{_img(folder / f'{name}_speedup.png')}{_img(folder / f'{name}_tokens_per_s.png')}"
                f"{_img(folder / f'{name}_metadata.png')}"
            )
        if nb_record.get("sweep"):
            parts.append(_sweep_html(nb_record["sweep"], folder / f"{name}_sweep", f"{c['name']}: acceptance sweep, "))
    shipped = shipped_sweep if shipped_sweep is not None else load_shipped()
    parts.append(_sweep_html(shipped, folder / "shipped_sweep", "Acceptance sweep, full size: "))
    return "<h2>Backend comparison and acceptance</h2>" + "".join(parts)


def _sweep_html(doc: dict, path: Path, title: str) -> str:
    plots.acceptance_sweep(doc, path)
    findings = "".join(f"<li>{html.escape(f)}</li>" for f in doc["findings"])
    return (
        f"<h3>{html.escape(title + provenance(doc))}</h3><ul>{findings}</ul>{sweep_table(doc)._repr_html_()}"
        f"{_img(path.with_suffix('.png'))}"
    )
