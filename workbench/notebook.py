"""Notebook-facing helpers: the run config from a notebook's parameters, prompt choice, tables of
run records, the notebook record, the expectation gate. Notebook 04's views of the real releases
are ``workbench.notebook.upstream`` (``workbench/views/upstream.py``).

A notebook writes one *notebook record* (``save_bundle``) at its ``record_path``: its parameters
and every run record it made, by role (e.g. ``run``; ``reference`` / ``fixed`` / ``undo``;
``eagle/triton``), with one role named primary. ``ci.nightly`` reads it back with ``load_bundle``.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.views.plots.common import record_label

SCHEMA = "workbench.notebook-record/1"
EXPECT_CHOICES = ("crash", "ok", "any")
RecordLike = dict | Any  # a run record dict or a RunResult


class ExpectationError(AssertionError):
    """A notebook's ``expect`` parameter was not met."""


def as_record(run: RecordLike) -> dict:
    """The run record dict of a RunResult or a record."""
    return run if isinstance(run, dict) else run.record


class Table:
    """Rows of dicts shown as an HTML table in Jupyter and as aligned text elsewhere."""

    def __init__(self, rows: Sequence[dict], columns: Sequence[str] | None = None) -> None:
        self.rows = list(rows)
        self.columns = list(columns or (self.rows[0].keys() if self.rows else []))

    def _cells(self) -> list[list[str]]:
        return [["" if r.get(c) is None else str(r.get(c)) for c in self.columns] for r in self.rows]

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(v)}</td>" for v in row) + "</tr>"
            for row in self._cells()
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        cells = self._cells()
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=False))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) for row in cells]
        return "\n".join(lines)


def select_prompts(prompts: list[str] | None = None, num_prompts: int | None = None) -> list[str]:
    """``prompts`` if given, else the first ``num_prompts`` of the shipped set (all when None)."""
    if prompts:
        return list(prompts)
    from workbench.models.loader import load_prompts

    shipped = load_prompts()
    return shipped[:num_prompts] if num_prompts else shipped


def run_config(params: Mapping[str, Any], **overrides: Any) -> dict:
    """The run parameters among a notebook's ``params``: its RunConfig fields, with ``prompts`` /
    ``num_prompts`` resolved to the prompt list (``select_prompts``), then ``overrides``. Other
    keys (``backends``, ``expect``, ``record_path``, ...) are the notebook's own. Validated now:
    a bad value raises ConfigError naming it and the valid ones, before anything runs."""
    from workbench.run.config import RunConfig, make_config

    fields = {f.name for f in dataclasses.fields(RunConfig)}
    config = {k: v for k, v in params.items() if k in fields}
    config["prompts"] = select_prompts(params.get("prompts"), params.get("num_prompts"))
    config.update(overrides)
    make_config(config)
    return config


def _fmt(x: float | None, digits: int = 2) -> str | None:
    return None if x is None else f"{x:.{digits}f}"


def summary_table(runs: Mapping[str, RecordLike] | Iterable[RecordLike]) -> Table:
    """One row per run: status, backend and kernel, revision, dp, the exception, accept length, tokens/s, hash."""
    items = runs.items() if isinstance(runs, Mapping) else ((str(i), r) for i, r in enumerate(runs))
    rows = []
    for role, run in items:
        rec = as_record(run)
        cfg, m, crash = rec["config"], rec.get("metrics") or {}, rec.get("crash") or {}
        rows.append(
            {
                "run": role,
                "status": rec["status"],
                "mode": cfg.get("mode"),
                "backend": record_label(rec, sep=" "),
                "kernel": cfg.get("kernel"),
                "revision": cfg["revision"] + (" + apply_fix()" if cfg.get("apply_fix_in_place") else ""),
                "dp": cfg["dp"],
                "exception": crash.get("exception_type"),
                "accept length": _fmt(m.get("accept_length_mean")),
                "tokens/s": _fmt(m.get("tokens_per_s"), 1),
                "outputs sha256": (rec.get("outputs_sha256") or "")[:16] or None,
            }
        )
    return Table(rows)


def where_table(run: RecordLike) -> Table:
    """Where the run was when it ended, per DP rank: assigned prompts, last forward pass, outcome."""
    rec = as_record(run)
    crash = rec.get("crash") or {}
    dp = rec.get("dp") or {}
    assignment = dp.get("assignment") or [list(range(len(rec["config"].get("prompts") or [])))]
    last = dp.get("last_forward") or {}
    rows = []
    for rank, prompts in enumerate(assignment):
        fwd = last.get(str(rank)) or {}
        crashed_here = crash.get("rank") == rank
        if crashed_here:
            fwd = {
                "phase": crash.get("phase"),
                "forward_mode": crash.get("forward_mode"),
                "batch_size": crash.get("batch_size"),
            }
        rows.append(
            {
                "rank": rank,
                "prompts": len(prompts),
                "idle": "yes" if not prompts else "no",
                "phase": fwd.get("phase"),
                "forward mode": fwd.get("forward_mode"),
                "batch size": fwd.get("batch_size"),
                "outcome": f"{crash.get('exception_type')}: {crash.get('message')}"
                if crashed_here
                else ("stopped (another rank failed)" if crash else rec["status"]),
            }
        )
    return Table(rows)


def traceback_text(run: RecordLike) -> str:
    """The crashing rank's traceback, or a line saying there was none."""
    crash = as_record(run).get("crash")
    if not crash:
        return "no crash: the run finished ok"
    return crash.get("traceback") or f"{crash.get('exception_type')}: {crash.get('message')} (no traceback captured)"


def show(fig: Any) -> None:
    """Display a matplotlib Figure as PNG in a notebook (works without pyplot and in papermill)."""
    from IPython.display import Image, display

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    display(Image(data=buf.getvalue()))


def save_bundle(
    path: str | Path,
    notebook: str,
    parameters: dict,
    runs: Mapping[str, RecordLike],
    primary: str,
    extra: dict | None = None,
) -> Path:
    """Write the notebook record (parameters + run records by role, plus ``extra`` top-level
    entries such as a comparison or a sweep document) as JSON; returns the path."""
    if primary not in runs:
        raise ValueError(f"primary run {primary!r} is not among the runs {sorted(runs)}")
    recs = {role: as_record(r) for role, r in runs.items()}
    doc = {
        "schema": SCHEMA,
        "notebook": notebook,
        "parameters": parameters,
        "primary": primary,
        "status": recs[primary]["status"],
        "runs": recs,
        **(extra or {}),
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, default=str))
    return p


def load_bundle(path: str | Path) -> dict:
    """Read a notebook record; a bare run record is wrapped as a bundle with one run, ``run``."""
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") == SCHEMA:
        return doc
    if "status" in doc and "config" in doc:
        return {
            "schema": SCHEMA,
            "notebook": None,
            "parameters": {},
            "primary": "run",
            "status": doc["status"],
            "runs": {"run": doc},
        }
    raise ValueError(f"{path} is neither a notebook record nor a run record")


def require(expect: str, *runs: RecordLike, same_outputs_as: RecordLike | None = None) -> str:
    """The notebook's gate: raise ExpectationError unless every run matches ``expect``.

    ``ok``: status ok (and, given ``same_outputs_as``, the same outputs_sha256); ``crash``: status
    crashed; ``any``: no check. Returns a one-line verdict."""
    if expect not in EXPECT_CHOICES:
        raise ValueError(f"invalid expect {expect!r}; valid: {', '.join(EXPECT_CHOICES)}")
    if expect == "any":
        return "expect='any': results shown, not checked"
    want = "ok" if expect == "ok" else "crashed"
    for run in map(as_record, runs):
        if run["status"] != want:
            crash = run.get("crash") or {}
            got = run["status"] + (f" ({crash.get('exception_type')}: {crash.get('message')})" if crash else "")
            raise ExpectationError(
                f"expect={expect!r} but the {record_label(run, ' ')} run on revision "
                f"{run['config']['revision']} dp {run['config']['dp']} ended {got}"
            )
        if expect == "ok" and same_outputs_as is not None:
            ref = as_record(same_outputs_as)
            if not same_outputs(run, ref):
                raise ExpectationError(
                    f"outputs differ from the {ref['config']['revision']} reference: "
                    f"{run.get('outputs_sha256')} != {ref.get('outputs_sha256')}"
                )
    return f"expect={expect!r}: met by {len(runs)} run(s)"


def same_outputs(a: RecordLike, b: RecordLike) -> bool:
    """Both runs finished and generated the same tokens (equal outputs_sha256)."""
    ha, hb = as_record(a).get("outputs_sha256"), as_record(b).get("outputs_sha256")
    return ha is not None and ha == hb


def compare_backends(
    config: dict, backends: Sequence[str], modes: Sequence[str] = ("greedy", "eagle")
) -> dict[str, Any]:
    """``reproduce`` once per backend and mode, under a progress bar; RunResults keyed ``"<mode>/<backend>"``.
    Crashes are data."""
    from workbench.run.api import reproduce
    from workbench.views.display import run_all

    return run_all(
        {
            f"{mode}/{b}": (lambda b=b, mode=mode: reproduce({**config, "backend": b, "mode": mode}))
            for b in backends
            for mode in modes
        },
        desc="backends",
    )


def __getattr__(name: str) -> Any:
    if name == "upstream":  # imported on use: views.py builds on this module's Table
        from workbench.views import upstream as views

        return views
    raise AttributeError(f"module 'workbench.notebook' has no attribute {name!r}")
