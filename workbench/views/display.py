"""Notebook display: a run record as HTML (status, where-table, kernel labels, outputs, a collapsible
highlighted traceback; ``RunResult``'s HTML view), decoded outputs with a diff between runs, a class's
fields, and progress bars (``tqdm.auto``) fed by a run's ``on_event`` callback: runs done, and what
the DP rank processes report."""

from __future__ import annotations

import dataclasses
import difflib
import html
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonTracebackLexer
from tqdm.auto import tqdm

from workbench.models.tokenizer import decode
from workbench.run.events import OnEvent
from workbench.run.record import RecordLike, RunRecord, RunResult, as_record
from workbench.views.tables import Table, where_table

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
    outputs = run.get("outputs") if isinstance(run, dict) else as_record(run).outputs  # a JSON form may be partial
    return [None if o is None else decode(o) for o in outputs or []]


def traceback_html(tb: str) -> str:
    """A traceback highlighted by Pygments, in a collapsible ``<details>``."""
    body = highlight(tb, PythonTracebackLexer(), HtmlFormatter(noclasses=True, nowrap=False))
    return f"<details><summary>traceback ({len(tb.splitlines())} lines)</summary>{body}</details>"


def run_html(record: RunRecord) -> str:
    """The run record as a notebook would show it (``RunResult._repr_html_``)."""
    cfg, crash, m = record.config, record.crash, record.metrics
    status = record.status
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
            f"<div style='color:{colour}'><b>{html.escape(crash.exception_type)}</b>: "
            f"{html.escape(crash.message)}</div>"
        )
        if crash.bundle:
            parts.append(
                f"<div>crash bundle: <code>{html.escape(crash.bundle)}</code> "
                f"(<code>result.replay_crash()</code> replays it here)</div>"
            )
    else:
        al, tps = m.get("accept_length_mean"), m.get("tokens_per_s")
        parts.append(
            f"<div>accept length {'-' if al is None else f'{al:.3f}'} · tokens/s "
            f"{'-' if tps is None else f'{tps:.1f}'} · outputs sha256 {str(record.outputs_sha256)[:16]}</div>"
        )
    parts.append(where_table(record)._repr_html_())
    texts = [t for t in decoded_outputs(record) if t is not None]
    if texts:
        shown = "".join(f"<pre style='margin:2px 0'>{html.escape(t)}</pre>" for t in texts[:4])
        parts.append(f"<details><summary>decoded outputs ({len(texts)})</summary>{shown}</details>")
    if crash and crash.traceback:
        parts.append(traceback_html(crash.traceback))
    return "<div class='wb-run'>" + "".join(parts) + "</div>"


def show_runs_as_html() -> None:
    """Make ``run_html`` the HTML view of every ``RunResult`` (the faces call this; the record renders
    nothing itself)."""
    RunResult.html_view = run_html


def traceback_text(run: RecordLike) -> str:
    """The crashing rank's traceback, or a line saying there was none."""
    crash = as_record(run).crash
    if not crash:
        return "no crash: the run finished ok"
    return crash.traceback or f"{crash.exception_type}: {crash.message} (no traceback captured)"


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


POSTFIX_EVERY_S = 0.2  # rank events arrive per forward; the bar's postfix is redrawn at most this often


@contextmanager
def progress(desc: str = "runs", disable: bool | None = False) -> Iterator[OnEvent]:
    """A ``tqdm.auto`` bar over runs, driven by the ``on_event`` callback it yields (pass it to
    ``reproduce``, ``compare``, ``sweep``, ``bench``): ``plan`` events add to the total, ``run`` events
    tick it, and DP rank events (the forward each rank is in, its end) show in the postfix.
    ``disable`` None: no bar where the output is not a terminal (tqdm's rule; the CLI's choice)."""
    bar = tqdm(total=None, desc=desc, unit="run", disable=disable)
    ranks: dict[int, str] = {}
    drawn = [0.0]

    def on_event(kind: str, rank: int | None, payload: Any) -> None:
        if kind == "plan":  # reset() is how a notebook bar learns a new total; the runs done stay counted
            done = bar.n
            bar.reset(total=(bar.total or 0) + payload["runs"])
            bar.update(done)
            return
        if kind == "run":
            ranks.clear()
            bar.set_description(f"{desc} ({payload['label']} {payload['status']})")
            bar.update(1)
            return
        if kind == "forward":
            ranks[rank] = f"{payload.get('phase')} {payload.get('forward_mode')} bs {payload.get('batch_size')}"
        elif kind == "done":
            crash = payload.crash  # the rank's RankReport
            ranks[rank] = f"crashed: {crash.exception_type}" if crash else "done"
        else:
            return
        now = time.monotonic()
        if kind == "done" or now - drawn[0] >= POSTFIX_EVERY_S:
            drawn[0] = now
            bar.set_postfix_str(" | ".join(f"rank {r}: {s}" for r, s in sorted(ranks.items())), refresh=True)

    try:
        yield on_event
    finally:
        bar.close()


def run_all(jobs: Mapping[Any, Callable[[OnEvent], Any]], desc: str = "runs") -> dict[Any, Any]:
    """Call each job (a run, given the bar's ``on_event``) under one progress bar; results by label."""
    out: dict[Any, Any] = {}
    with progress(desc) as on_event:
        on_event("plan", None, {"runs": len(jobs)})
        for label, job in jobs.items():
            out[label] = job(on_event)
            on_event("run", None, {"label": label, "status": getattr(out[label], "status", "done")})
    return out
