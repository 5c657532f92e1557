"""Acceptance sweep: accept length and acceptance per draft position over (steps, topk, draft_tokens)
settings, per backend and dtype, with each EAGLE3 output compared to the fp32 greedy output.

In float32 the backends compute the same tokens (greedy verification is lossless), so their
results coincide; in bfloat16 each backend's numerics (Triton kernels accumulate in fp32, the
torch paths in what torch picks) can move tokens. Backends with identical results are grouped,
and the group is reported once.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from pathlib import Path

from workbench.experiments.stats import records_commit
from workbench.run.events import OnEvent
from workbench.run.labels import backend_sort_key, record_label
from workbench.run.record import RunRecord

SCHEMA = "workbench.sweep/1"  # the shipped acceptance_sweep.json's format name (not a module path)
# (7, 1, 8) is the comparison's chain (workbench.experiments.definition); the CLI's --settings default
SETTINGS: tuple[tuple[int, int, int], ...] = ((1, 1, 2), (3, 1, 4), (3, 2, 6), (7, 1, 8), (5, 4, 16), (6, 10, 32))
SHIPPED = Path(__file__).resolve().parent.parent / "assets" / "acceptance_sweep.json"
AGREEMENT = (
    "identical_prompts: prompts whose EAGLE3 output equals the fp32 greedy output token for token; "
    "prefix_share: tokens before the first difference over all tokens generated"
)


def agreement(outputs: list[list[int]], reference: list[list[int]]) -> dict:
    """How far EAGLE3 outputs follow the reference outputs (lists of token ids per prompt)."""
    same, prefix, total = 0, 0, 0
    for out, ref in zip(outputs, reference, strict=False):
        same += out == ref
        n = next((i for i, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), min(len(out), len(ref)))
        prefix += n
        total += len(ref)
    return {"identical_prompts": same, "prompts": len(reference), "prefix_share": prefix / total if total else None}


def _row(rec: RunRecord, reference: list[list[int]]) -> dict:
    cfg, m = rec.config, rec.metrics
    return {
        "backend": cfg["backend"],
        "label": record_label(rec, sep=" "),
        "kernel": cfg["kernel"],
        "dtype": cfg["dtype"],
        "setting": [cfg["steps"], cfg["topk"], cfg["draft_tokens"]],
        "status": rec.status,
        "accept_length_mean": m["accept_length_mean"],
        "acceptance_rate": m["acceptance_rate"],
        "acceptance_per_position": m["acceptance_per_position"],
        "verify_steps": m["verify_steps"],
        "outputs_sha256": rec.outputs_sha256,
        "agreement_with_fp32_greedy": agreement(rec.outputs, reference) if rec.status == "ok" else None,
    }


def _fingerprint(row: dict) -> tuple:
    return (
        row["status"],
        row["outputs_sha256"],
        row["accept_length_mean"],
        tuple(row["acceptance_per_position"] or ()),
    )


def groups(rows: list[dict]) -> list[dict]:
    """Rows of one dtype × setting with identical results merged: ``labels`` lists the backends."""
    merged: dict[tuple, dict] = {}
    for r in sorted(rows, key=lambda r: backend_sort_key(r["backend"])):
        key = (r["dtype"], tuple(r["setting"]), _fingerprint(r))
        if key in merged:
            merged[key]["labels"].append(r["label"])
        else:
            merged[key] = {**r, "labels": [r["label"]]}
    return list(merged.values())


def _follows_reference(rows: list[dict]) -> str:
    """Where outputs leave the fp32 greedy output: the settings and how many prompts still match."""
    off = [
        r
        for r in rows
        if r["agreement_with_fp32_greedy"]
        and r["agreement_with_fp32_greedy"]["identical_prompts"] < r["agreement_with_fp32_greedy"]["prompts"]
    ]
    if not off:
        return "every output equals the fp32 greedy output"
    where = sorted(
        {
            (
                tuple(r["setting"]),
                r["agreement_with_fp32_greedy"]["identical_prompts"],
                r["agreement_with_fp32_greedy"]["prompts"],
                round(r["agreement_with_fp32_greedy"]["prefix_share"], 3),
            )
            for r in off
        }
    )
    return "outputs leave the fp32 greedy output at " + "; ".join(
        f"{list(s)} ({same}/{n} prompts identical, prefix agreement {share})" for s, same, n, share in where
    )


def findings(rows: list[dict]) -> list[str]:
    """One line per dtype: do the backends agree exactly, and how far the outputs follow fp32 greedy."""
    lines = []
    for dtype in sorted({r["dtype"] for r in rows}):
        mine = [r for r in rows if r["dtype"] == dtype]
        settings = sorted({tuple(r["setting"]) for r in mine})
        split = [s for s in settings if len(groups([r for r in mine if tuple(r["setting"]) == s])) > 1]
        backends = sorted({r["label"] for r in mine})
        if len(backends) < 2:
            head = f"{dtype}: one backend measured ({', '.join(backends)})"
        elif not split:
            head = (
                f"{dtype}: all {len(backends)} backends agree exactly (same tokens, same acceptance) at every "
                f"setting; one curve stands for all"
            )
        else:
            head = (
                f"{dtype}: backends differ at {len(split)} of {len(settings)} settings "
                f"({', '.join(str(list(s)) for s in split)})"
            )
        lines.append(f"{head}; {_follows_reference(mine)}.")
    return lines


def sweep(
    config: dict,
    backends: Sequence[str],
    settings: Sequence[Sequence[int]] = SETTINGS,
    dtypes: Sequence[str] = ("float32",),
    *,
    reference_backend: str = "torch_native",
    verbose: bool = False,
    on_event: OnEvent | None = None,
) -> dict:
    """Run every backend × dtype × setting once (acceptance is deterministic: no repeats needed),
    plus one fp32 greedy reference run; returns the sweep document. ``on_event``: progress
    (``workbench.run.events``)."""
    from workbench.run.api import reproduce  # the engine (torch) only when running: reading a sweep needs none

    if on_event is not None:
        on_event("plan", None, {"runs": 1 + len(dtypes) * len(settings) * len(backends)})
    ref = reproduce({**config, "backend": reference_backend, "mode": "greedy", "dtype": "float32"}, on_event=on_event)
    if on_event is not None:
        on_event("run", None, {"label": f"greedy/{reference_backend} float32 reference", "status": ref.status})
    if ref.status != "ok":
        raise RuntimeError(f"the fp32 greedy reference run ended {ref.status}: {ref.summary()}")
    reference = ref.record.outputs
    rows, records = [], [ref.record]
    for dtype in dtypes:
        for steps, topk, draft_tokens in settings:
            for b in backends:
                rec = reproduce(
                    {
                        **config,
                        "backend": b,
                        "mode": "eagle",
                        "dtype": dtype,
                        "steps": steps,
                        "topk": topk,
                        "draft_tokens": draft_tokens,
                    },
                    on_event=on_event,
                ).record
                records.append(rec)
                rows.append(_row(rec, reference))
                if on_event is not None:
                    label = f"{b} {dtype} ({steps}, {topk}, {draft_tokens})"
                    on_event("run", None, {"label": label, "status": rec.status})
                if verbose:
                    r = rows[-1]
                    print(
                        f"{dtype} {r['setting']} {r['label']}: {r['status']} accept length {r['accept_length_mean']} "
                        f"agreement {r['agreement_with_fp32_greedy']}",
                        flush=True,
                    )
    env = ref.record.env
    return {
        "schema": SCHEMA,
        "measured": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {k: env.get(k) for k in ("python", "torch", "triton", "platform")},
        "models_sha256": ref.record.config.get("models_sha256"),
        "commit": records_commit(records),
        "config": {k: v for k, v in config.items() if k not in ("backend", "prompts")},
        "prompts": len(reference),
        "max_new_tokens": config.get("max_new_tokens"),
        "reference": {
            "backend": reference_backend,
            "mode": "greedy",
            "dtype": "float32",
            "outputs_sha256": ref.record.outputs_sha256,
        },
        "agreement_definition": AGREEMENT,
        "rows": rows,
        "findings": findings(rows),
    }


def merge(docs: Sequence[dict]) -> dict:
    """One sweep from parts run separately (e.g. per dtype, in parallel) on the same prompts, length
    and fp32 greedy reference; refuses parts that differ in those."""
    first = docs[0]
    for d in docs[1:]:
        for k in ("prompts", "max_new_tokens", "reference", "models_sha256"):
            a, b = d.get(k), first.get(k)
            if a != b:
                raise ValueError(f"sweep parts differ in {k}: {a!r} vs {b!r}; valid: parts of one sweep")
    rows = [r for d in docs for r in d["rows"]]
    commits = sorted(
        {c for d in docs for c in ([d["commit"]] if isinstance(d.get("commit"), str) else d.get("commit") or [])}
    )
    return {
        **first,
        "commit": commits[0] if len(commits) == 1 else (commits or None),
        "measured": max(d["measured"] for d in docs),
        "rows": rows,
        "findings": findings(rows),
        "parts": len(docs),
    }


def save(doc: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def load_shipped(path: Path | None = None) -> dict:
    """The shipped full sweep, marked ``shipped`` (with its measurement date and versions)."""
    doc = json.loads(Path(path or SHIPPED).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path or SHIPPED} is not a sweep document (schema {doc.get('schema')!r}, want {SCHEMA!r})")
    return {**doc, "shipped": True}


def provenance(doc: dict) -> str:
    """``shipped measurement of <date> (torch x, triton y, ...)`` or ``measured live now``."""
    v = doc.get("versions") or {}
    what = "shipped measurement" if doc.get("shipped") else "measured live"
    backends = ", ".join(sorted({r["label"] for r in doc["rows"]}))
    models = f"; models sha256 {doc['models_sha256'][:12]}" if doc.get("models_sha256") else ""
    commit = f"; commit {doc['commit']}" if doc.get("commit") else ""  # the runs' (sweep), or whoever shipped it
    return (
        f"{what} of {doc.get('measured')} ({doc['prompts']} prompts x {doc.get('max_new_tokens')} tokens; "
        f"backends {backends}; python {v.get('python')}, torch {v.get('torch')}, triton {v.get('triton')}{models}"
        f"{commit})"
    )
