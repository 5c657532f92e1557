"""Notebook display: a run record as HTML (status, where-table, kernel labels, outputs, a collapsible
highlighted traceback), decoded outputs with a diff between runs, a class's fields, and progress
bars (``tqdm.auto``) for cells that make several runs, fed by what the DP rank processes report."""

from __future__ import annotations

import dataclasses
import difflib
import html
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonTracebackLexer

from workbench.notebook import RecordLike, Table, as_record, where_table

STATUS_COLOURS = {"ok": "#2e7d32", "crashed": "#c62828", "timeout": "#ef6c00", "error": "#6a1b9a"}


class HTML:
    """HTML in Jupyter, plain text elsewhere."""

    def __init__(self, html_text: str, text: str) -> None:
        self.html, self.text = html_text, text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def decoded_outputs(run: RecordLike) -> list[str | None]:
    """The generated text of every prompt (None where a prompt produced nothing)."""
    from workbench.models.tokenizer import decode

    return [None if o is None else decode(o) for o in as_record(run).get("outputs") or []]


def traceback_html(tb: str) -> str:
    """A traceback highlighted by Pygments, in a collapsible ``<details>``."""
    body = highlight(tb, PythonTracebackLexer(), HtmlFormatter(noclasses=True, nowrap=False))
    return f"<details><summary>traceback ({len(tb.splitlines())} lines)</summary>{body}</details>"


def run_html(record: dict) -> str:
    """The run record as a notebook would show it (``RunResult._repr_html_``)."""
    cfg, crash, m = record["config"], record.get("crash"), record.get("metrics") or {}
    status = record["status"]
    colour = STATUS_COLOURS.get(status, "#455a64")
    kernel = cfg.get("kernel") or "?"
    label = kernel + (" (stand-in for the library's GPU kernel)" if cfg.get("kernel_stand_in") else "")
    head = (
        f"<span style='background:{colour};color:white;padding:1px 6px;border-radius:3px'>{html.escape(status)}</span> "
        f"<b>{html.escape(cfg['backend'])}</b> · kernel {html.escape(label)} · revision {html.escape(cfg['revision'])}"
        f"{' + apply_fix()' if cfg.get('apply_fix_in_place') else ''} "
        f"· dp {cfg['dp']} ({html.escape(str(cfg.get('dp_policy')))})"
        f" · steps {cfg['steps']} topk {cfg['topk']} draft tokens {cfg['draft_tokens']} "
        f"· mode {html.escape(str(cfg.get('mode')))}"
    )
    parts = [f"<div>{head}</div>"]
    if crash:
        parts.append(
            f"<div style='color:{colour}'><b>{html.escape(str(crash.get('exception_type')))}</b>: "
            f"{html.escape(str(crash.get('message')))}</div>"
        )
        if crash.get("bundle"):
            parts.append(
                f"<div>crash bundle: <code>{html.escape(crash['bundle'])}</code> "
                f"(<code>result.replay_crash()</code> replays it here)</div>"
            )
    else:
        al, tps = m.get("accept_length_mean"), m.get("tokens_per_s")
        parts.append(
            f"<div>accept length {'-' if al is None else f'{al:.3f}'} · tokens/s "
            f"{'-' if tps is None else f'{tps:.1f}'} · outputs sha256 {str(record.get('outputs_sha256'))[:16]}</div>"
        )
    parts.append(where_table(record)._repr_html_())
    texts = [t for t in decoded_outputs(record) if t is not None]
    if texts:
        shown = "".join(f"<pre style='margin:2px 0'>{html.escape(t)}</pre>" for t in texts[:4])
        parts.append(f"<details><summary>decoded outputs ({len(texts)})</summary>{shown}</details>")
    if crash and crash.get("traceback"):
        parts.append(traceback_html(crash["traceback"]))
    return "<div class='wb-run'>" + "".join(parts) + "</div>"


def text_diff(a: RecordLike, b: RecordLike, labels: Sequence[str] = ("a", "b")) -> HTML:
    """Decoded outputs of two runs, prompt by prompt: identical, or a line diff (``difflib``)."""
    ta, tb = decoded_outputs(a), decoded_outputs(b)
    rows_html, rows_text = [], []
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == y:
            verdict = "identical"
            body = f"<pre style='margin:2px 0'>{html.escape(str(x))}</pre>"
        else:
            verdict = "DIFFERENT"
            body = difflib.HtmlDiff(wrapcolumn=80).make_table(
                str(x).splitlines() or [""], str(y).splitlines() or [""], labels[0], labels[1]
            )
        rows_html.append(f"<div><b>prompt {i}</b>: {verdict}{body}</div>")
        rows_text.append(f"prompt {i}: {verdict}\n  {labels[0]}: {x!r}\n  {labels[1]}: {y!r}")
    head = f"decoded outputs, {labels[0]} vs {labels[1]}"
    return HTML(f"<div><b>{html.escape(head)}</b>{''.join(rows_html)}</div>", head + "\n" + "\n".join(rows_text))


def class_fields(cls: type) -> Table:
    """A dataclass's fields: name, annotation, default (what ``apply_fix`` changes)."""
    rows = []
    for f in dataclasses.fields(cls):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else ("factory" if f.default_factory is not dataclasses.MISSING else "required")
        )
        rows.append(
            {"field": f.name, "type": str(f.type), "default": repr(default) if default != "required" else default}
        )
    return Table(rows)


@contextmanager
def progress(total: int, desc: str = "runs") -> Iterator[Callable[[str], None]]:
    """A ``tqdm.auto`` bar over ``total`` runs; yields ``done(label)`` to call after each run. While
    it is open, DP rank events (the forward each rank is in, failures) show in the bar's postfix."""
    from tqdm.auto import tqdm

    from workbench.run.dp import launch

    bar = tqdm(total=total, desc=desc, unit="run")
    ranks: dict[int, str] = {}

    def on_event(kind: str, rank: int, payload: Any) -> None:
        if kind == "forward":
            ranks[rank] = f"{payload.get('phase')} {payload.get('forward_mode')} bs {payload.get('batch_size')}"
        elif kind == "done":
            crash = (payload or {}).get("crash")
            ranks[rank] = f"crashed: {crash['exception_type']}" if crash else "done"
        else:
            return
        bar.set_postfix_str(" | ".join(f"rank {r}: {s}" for r, s in sorted(ranks.items())), refresh=True)

    def done(label: str) -> None:
        ranks.clear()
        bar.set_description(f"{desc} ({label} done)")
        bar.update(1)

    launch.listeners.append(on_event)
    try:
        yield done
    finally:
        launch.listeners.remove(on_event)
        bar.close()


def run_all(jobs: Mapping[str, Callable[[], Any]], desc: str = "runs") -> dict[str, Any]:
    """Call each job (a run) under one progress bar; results by label."""
    out: dict[str, Any] = {}
    with progress(len(jobs), desc) as done:
        for label, job in jobs.items():
            out[label] = job()
            done(label)
    return out
