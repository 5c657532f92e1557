"""Notebook views of a replayed crash: the failing frame's source, what the backend reads from
``spec_info`` next to what the bundle holds, the frame's locals, the fixed metadata and the
comparison with the real release (a shipped measurement, labelled so, when present)."""

from __future__ import annotations

import ast
import html
import inspect
import linecache
import re
import textwrap
import traceback
from pathlib import Path
from typing import Any

from workbench.backends import get_backend_class
from workbench.debug.bundle import CrashBundle
from workbench.debug.replay import ReplayResult
from workbench.upstream.replay.bundles import SHIPPED, load_shipped
from workbench.views.display import HTML
from workbench.views.tables import Table


def innermost(exc: BaseException) -> traceback.FrameSummary:
    return traceback.extract_tb(exc.__traceback__)[-1]


def frame_source(exc: BaseException, context: int = 6) -> HTML:
    """The innermost frame's source, ``context`` lines either side, the failing line marked."""
    fr = innermost(exc)
    lo = max(1, fr.lineno - context)
    lines = [(n, linecache.getline(fr.filename, n).rstrip("\n")) for n in range(lo, fr.lineno + context + 1)]
    lines = [(n, s) for n, s in lines if s or n <= fr.lineno]
    text = "\n".join(f"{'>>' if n == fr.lineno else '  '} {n:4d}  {s}" for n, s in lines)
    rows = "".join(
        f"<div style='{'background:#fdd;font-weight:bold' if n == fr.lineno else ''}'>"
        f"{'&gt;&gt;' if n == fr.lineno else '&nbsp;&nbsp;'} {n:4d}  {html.escape(s)}</div>"
        for n, s in lines
    )
    head = f"{fr.filename}:{fr.lineno} in {fr.name}"
    return HTML(f"<div><code>{html.escape(head)}</code><pre style='margin:4px 0'>{rows}</pre></div>", f"{head}\n{text}")


def _reads(func: Any) -> dict[str, list[int]]:
    """Attributes read off the local ``spec_info`` in ``func``'s source, with their line numbers."""
    src = textwrap.dedent(inspect.getsource(func))
    first = inspect.getsourcelines(func)[1]
    found: dict[str, list[int]] = {}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "spec_info":
            found.setdefault(node.attr, []).append(first + node.lineno - 1)
    return {k: sorted(set(v)) for k, v in found.items()}


def _innermost_locals(exc: BaseException) -> dict:
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_locals


def spec_reads(bundle: CrashBundle, exc: BaseException | None = None) -> Table:
    """One row per ``spec_info.<attr>`` the bundle's backend reads in ``init_forward_metadata``
    (found in its source), beside what the bundle's spec_info class declares and holds; with the
    replayed ``exc``, "has it" asks the live ``spec_info`` of the failing frame."""
    spec_info = _innermost_locals(exc).get("spec_info") if exc is not None else None

    func = get_backend_class(bundle.meta["backend"]).init_forward_metadata
    fields = (bundle.meta["spec_info"] or {}).get("fields", {})
    cls = bundle.spec_class()
    has_col = f"{cls.__name__ if cls else 'spec_info'} has it"
    reads = _reads(func)
    failing = innermost(exc).lineno if exc is not None else None
    reads = dict(sorted(reads.items(), key=lambda kv: failing not in kv[1]))  # the failing line's reads first
    rows = []
    for attr in list(reads) + [f for f in fields if f not in reads]:
        has = hasattr(spec_info, attr) if spec_info is not None else attr in fields
        rows.append(
            {
                "spec_info field": attr,
                "backend reads it at line": ", ".join(map(str, reads.get(attr, []))) or "-",
                has_col: "yes" if has else "NO",
                "value in the bundle": _entry_text(bundle, fields[attr]) if attr in fields else "-",
            }
        )
    return Table(rows)


def _entry_text(bundle: CrashBundle, e: dict) -> str:
    kind = e["kind"]
    if kind == "tensor":
        t = bundle.tensors[e["key"]]
        return f"tensor {str(t.dtype).removeprefix('torch.')} {list(t.shape)}" + (
            f" = {t.tolist()}" if t.numel() <= 8 else ""
        )
    if kind == "tensor_omitted":
        return f"tensor {e['dtype']} {e['shape']} (omitted: over 1 MiB)"
    if kind == "enum":
        return f"{e['type']}.{e['value']}"
    return "None" if kind == "none" else repr(e["value"])


def frame_locals(exc: BaseException) -> Table:
    """The innermost frame's locals, as ``%debug`` shows them there."""
    rows = []
    for name, v in _innermost_locals(exc).items():
        r = " ".join(repr(v).split())
        rows.append({"local": name, "type": type(v).__name__, "value": r if len(r) <= 120 else r[:117] + "..."})
    return Table(rows)


def metadata_table(result: ReplayResult, bundle: CrashBundle) -> Table:
    """Per batch row: request row, seq_len, the backend's kv_indptr / kv_indices, the reference's, equal?"""
    return Table(result.rows(bundle.fb("seq_lens").tolist(), bundle.fb("req_pool_indices").tolist()))


def bundle_tensors(bundle: CrashBundle) -> Table:
    """The bundle's tensors: key, dtype, shape and (small ones) values."""
    return Table(
        [
            {
                "key": k,
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "values": t.tolist() if t.numel() <= 16 else "...",
            }
            for k, t in bundle.tensors.items()
        ]
    )


def frame_check(exc: BaseException, bundle: CrashBundle, rank_traceback: str | None) -> Table:
    """The replayed exception beside the rank's: type, message, innermost file:line."""
    fr, rec = innermost(exc), bundle.meta["exception"]
    rows = [
        {
            "where": "replayed in this process",
            "type": type(exc).__name__,
            "message": str(exc),
            "file:line": f"{fr.filename}:{fr.lineno}",
            "function": fr.name,
        },
        {
            "where": f"rank {bundle.meta['rank']} (bundle)",
            "type": rec["type"],
            "message": rec["message"],
            "file:line": f"{rec['file']}:{rec['line']}",
            "function": rec["function"],
        },
    ]
    if rank_traceback:
        f, n = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', rank_traceback)[-1][:2]
        rows.append(
            {
                "where": f"rank {bundle.meta['rank']} (record traceback)",
                "type": rec["type"],
                "message": "",
                "file:line": f"{f}:{n}",
                "function": "",
            }
        )
    return Table(rows)


def upstream_comparison(bundle_path: str) -> HTML:
    """The real-release comparison for bundles: the shipped measurement (labelled shipped, with its
    date, releases and the bundle it was made on) when the workbench has one, else the command that
    measures this bundle live. Says whether the shipped bundle is this one (same sha256)."""
    import hashlib

    cmd = f"workbench upstream replay --bundle {bundle_path} --sglang 0.5.13 0.5.14"
    if not SHIPPED.exists():
        text = (
            "real-release comparison: no shipped measurement in this workbench; run\n"
            f"  {cmd}\n(installs the real SGLang releases; needs the package registries)"
        )
        return HTML(f"<pre>{html.escape(text)}</pre>", text)
    doc = load_shipped()
    d = Path(bundle_path)
    mine = hashlib.sha256((d / "bundle.json").read_bytes() + (d / "tensors.safetensors").read_bytes()).hexdigest()
    meta = doc["bundle_meta"]
    same = (
        "this bundle"
        if mine == doc["bundle_sha256"]
        else f"NOT this notebook's bundle: a {meta['backend']} {meta['revision']} "
        f"{meta['phase']} {meta['forward_mode']} "
        f"batch of size {meta['batch_size']} (rank {meta['rank']} of dp {meta['dp']}), reference {doc['reference']}"
    )
    rows = [
        {
            "sglang": v,
            "status": r.get("status"),
            "same exception as the bundle": r.get("same_exception_as_bundle", "-"),
            "raised at": r.get("raised_at", "-"),
            "metadata": r.get("metadata", "-"),
            "equal to the reference": r.get("equal_to_reference", "-"),
            "torch / triton": f"{(r.get('env') or {}).get('torch')} / {(r.get('env') or {}).get('triton')}",
        }
        for v, r in doc["releases"].items()
    ]
    table = Table(rows)
    head = f"SHIPPED: {doc['label']}; measured on {same}"
    text = f"{head}\n{table!r}\nthis bundle, live: {cmd}"
    return HTML(
        f"<p><b>{html.escape(head)}</b></p>{table._repr_html_()}<p>this bundle, live: "
        f"<code>{html.escape(cmd)}</code></p>",
        text,
    )


def replay_record(bundle: CrashBundle | None, replayed: BaseException | None, fixed: ReplayResult | None) -> dict:
    """The notebook record's ``replay`` role: status ok when the replay raised the recorded exception
    at the recorded frame and the fixed metadata equals the reference, else ``mismatch`` with problems."""
    problems: list[str] = []
    if bundle is None:
        problems.append("no crash bundle: no forward raised in this run")
    else:
        rec = bundle.meta["exception"]
        if replayed is None:
            problems.append(f"the replay did not raise the recorded {rec['type']}")
        else:
            fr = innermost(replayed)
            got = (type(replayed).__name__, str(replayed), fr.filename, fr.lineno)
            if got != (rec["type"], rec["message"], rec["file"], rec["line"]):
                problems.append(f"replayed {got} != recorded {(rec['type'], rec['message'], rec['file'], rec['line'])}")
        if fixed is None or fixed.matches_reference is not True:
            problems.append("with the fix: " + (fixed.summary() if fixed else "no metadata"))
    return {
        "status": "ok" if not problems else "mismatch",
        "crash": None,
        "problems": problems,
        "config": {
            "backend": "workbench debug (in-process replay)",
            "kernel": None,
            "bundle": str(bundle.path) if bundle else None,
        },
        "fixed_metadata": fixed.to_dict() if fixed else None,
    }
