"""``explore``: the real runtime over every configuration a release offers, one cell each.

The axes come from the release's own sources: the speculative algorithms its ``SpeculativeAlgorithm``
enum defines and the attention backends its ``ATTENTION_BACKEND_CHOICES`` list holds (with the
section comment each one sits under, e.g. ``# NVIDIA specific``), crossed with DP 1 / 2 / 3, the idle
mode (``run.IDLE_MODES``: ranks idle from the start, or going idle mid-run) and the overlap schedule
on / off. A value the real runtime cannot run here is one ``limit`` cell with the reason (the release line or
the real runtime's restriction), the other axes ``*``; never dropped. Every other cell is run through
``run_runtime`` and judged (``classify``): its ``verdict`` is ``ok`` (outputs equal to HF), ``crashed`` (rank,
phase, mode, file:line, the record; ``known`` when a shipped record or upstream-ready report of the same
release crashed at the same line in the same pass (or either names no pass), else a reproducer command),
``limit`` (a known upstream limit the record names, or a set-up error before any request), ``failed`` (outputs
that differ from HF with no limit to explain it, a timeout, an error after the requests were sent, or a
shim-guard violation).
"""

from __future__ import annotations

import ast
import datetime as _dt
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from workbench.run.provenance import workbench_commit
from workbench.run.serialise import from_dict, to_dict
from workbench.upstream.context import UpstreamContext
from workbench.upstream.sources.envs import ensure_env, ensure_sources
from workbench.upstream.sources.releases import check_version, known_releases

from .release_record import RuntimeRecord, check_reference
from .release_run import (
    ALGORITHMS,
    BACKENDS,
    DP_SIZES,
    IDLE_MODES,
    RuntimeConfigError,
    _reference,
    load_prompts,
    run_runtime,
)

RUNTIME_ALGORITHMS = ALGORITHMS  # what run_runtime starts, each with its draft (run.DRAFT_MODEL)
VERDICTS = ("ok", "crashed", "limit", "failed")  # a cell's verdict (`classify`)
SHIPPED_RUNS = Path(__file__).resolve().parents[2] / "assets" / "runtime_runs.json"
SHIPPED_REPORTS = Path(__file__).resolve().parents[2] / "assets" / "upstream_reports"
SHIPPED_EXPLORE = Path(__file__).resolve().parents[2] / "assets" / "runtime_explore.json"
_CHOICE_FILES = ("srt/arg_groups/choices.py", "srt/server_args.py")
_SECTION_REASONS = {
    "nvidia": "its kernels are CUDA-only; this machine has no GPU",
    "amd": "its kernels are ROCm-only; this machine has no GPU",
}
_BACKEND_REASONS = {
    "intel_amx": "needs sgl_kernel's CPU build (the AMX attention and verify kernels); the lane runs a stand-in "
    "sgl_kernel that provides only the names its shims list",
    "ascend": "needs an Ascend NPU (torch_npu)",
    "intel_xpu": "needs an Intel XPU device",
}


# What stops an algorithm the real runtime does not start, found in the release by (function, fragment): the first
# line holding the fragment after the line defining the function; with the reason, and whose limit it is.
_ALGORITHM_STOPS = {
    "DFLASH": (
        "srt/arg_groups/speculative_hook.py",
        "def _handle_dflash(",
        'cfg.device.startswith("cuda") or cfg.device == "npu"',
        "release: _handle_dflash accepts the devices cuda, npu and xpu only and raises ValueError for device "
        "'cpu' (before it reads any draft model)",
    ),
    "UNO": (
        "srt/arg_groups/speculative_hook.py",
        "def _handle_uno(",
        "UNO only supports CUDA.",
        "release: _handle_uno raises ValueError('UNO only supports CUDA.') for device 'cpu'",
    ),
    "DSPARK": (
        "srt/arg_groups/speculative_hook.py",
        "def _handle_dspark(",
        "only supports CUDA, NPU or XPU device",
        "release: _handle_dspark raises ValueError for a device other than cuda, npu or xpu",
    ),
    "FROZEN_KV_MTP": (
        "srt/arg_groups/speculative_hook.py",
        "def _resolve_speculative_algorithm_alias(",
        'return "FROZEN_KV_MTP"',
        "lane: the release runs FROZEN_KV_MTP for a Gemma4 assistant draft (EAGLE/NEXTN with a "
        "Gemma4AssistantForCausalLM draft is promoted to it here; the draft reads the target's frozen KV through "
        "build_frozen_kv_mtp_context, models/gemma4_mtp.py); the lane has no Gemma4 target or assistant draft",
    ),
}
# The release's CPU override of the overlap schedule, looked up for the reason of an overlap-on cell it turned off,
# and the server-argument handler of each lane algorithm (the release's SpeculativeAlgorithm.handle_server_args).
_OVERLAP_OFF = ("srt/arg_groups/speculative_hook.py", "def _disable_overlap_schedule_for_cpu(")
_HANDLERS = {
    "EAGLE3": "_handle_eagle_family",
    "EAGLE": "_handle_eagle_family",
    "STANDALONE": "_handle_eagle_family",
    "NGRAM": "_handle_ngram",
}


def calls_overlap_off(src: Path, algorithm: str) -> str | None:
    """``file:line`` where the release's server-argument handler for ``algorithm`` calls
    ``_disable_overlap_schedule_for_cpu`` (None: it does not, or the release has no such handler)."""
    handler = _HANDLERS.get(algorithm)
    path = _release_file(src, _OVERLAP_OFF[0])
    if handler is None or not path.is_file():
        return None
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"def {handler}(")), None)
    if start is None:
        return None
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("def "):
            return None
        if "_disable_overlap_schedule_for_cpu(" in lines[i]:
            return f"{_OVERLAP_OFF[0].removeprefix('srt/')}:{i + 1}"
    return None


def release_line(src: Path, rel: str, after: str, fragment: str | None = None) -> str | None:
    """``file:line`` of the first line holding ``fragment`` at or after the line holding ``after`` in the
    release file ``rel`` (``fragment`` None: the line of ``after``); None when the release has neither."""
    path = _release_file(src, rel)
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if after in line), None)
    if start is None:
        return None
    if fragment is None:
        return f"{rel.removeprefix('srt/')}:{start + 1}"
    hit = next((i for i in range(start, len(lines)) if fragment in lines[i]), None)
    return None if hit is None else f"{rel.removeprefix('srt/')}:{hit + 1}"


class ExploreError(RuntimeConfigError):
    """A bad argument (release, backend, algorithm), named with the valid values, before any rank starts."""


@dataclass(frozen=True)
class Axes:
    """What the release offers: its speculative algorithms and attention backends, with where each is defined."""

    algorithms: dict  # name -> "file:line" of the enum member
    backends: dict  # name -> {"line": "file:line", "section": the comment above it or None}


@dataclass
class Cell:
    """One configuration; ``*`` on an axis that a limit on another axis makes moot."""

    algorithm: str
    backend: str
    dp: int | str
    idle: str
    overlap: bool | str
    verdict: str | None = None
    reason: str | None = None
    crash: dict | None = None
    known: bool | None = None
    reproducer: str | None = None
    wall_s: float | None = None
    record: dict | None = None

    @property
    def key(self) -> str:
        """``algorithm/backend/dpN/idle/overlap-on|off``, the cell's name in the output and for ``--cell``."""
        ov = self.overlap if isinstance(self.overlap, str) else ("overlap-on" if self.overlap else "overlap-off")
        dp = f"dp{self.dp}" if isinstance(self.dp, int) else self.dp
        return f"{self.algorithm}/{self.backend}/{dp}/{self.idle}/{ov}"


def _release_file(src: Path, rel: str) -> Path:
    return src / "sglang" / rel


def read_axes(src: Path) -> Axes:
    """The algorithms and attention backends the release at ``src`` (holding ``sglang/``) defines, read with ast."""
    spec = _release_file(src, "srt/speculative/spec_info.py")
    algorithms: dict = {}
    for node in ast.walk(ast.parse(spec.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                    name = stmt.targets[0].id
                    if name.isupper() and name != "NONE":
                        algorithms[name] = f"speculative/spec_info.py:{stmt.lineno}"
    for rel in _CHOICE_FILES:
        path = _release_file(src, rel)
        if not path.is_file():
            continue
        lines = path.read_text().splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("ATTENTION_BACKEND_CHOICES = [")), None)
        if start is None:
            continue
        backends, section = {}, None
        short = rel.removeprefix("srt/")
        for i in range(start + 1, len(lines)):
            text = lines[i].strip()
            if text.startswith("]"):
                break
            if text.startswith("#"):
                section = text.lstrip("# ").strip()
                continue
            m = re.match(r'"([^"]+)"', text)
            if m:
                backends[m.group(1)] = {"line": f"{short}:{i + 1}", "section": section}
        if algorithms and backends:
            return Axes(algorithms, backends)
    raise ExploreError(
        f"cannot read the release's axes under {src}: no SpeculativeAlgorithm or ATTENTION_BACKEND_CHOICES"
    )


def algorithm_limit(name: str, where: str, src: Path | None = None) -> str | None:
    """Why the real runtime cannot run algorithm ``name`` (None: it can): the release line that stops it (found in
    the release at ``src``, ``_ALGORITHM_STOPS``), or the real runtime's own restriction."""
    if name in RUNTIME_ALGORITHMS:
        return None
    stop = _ALGORITHM_STOPS.get(name)
    line = release_line(src, stop[0], stop[1], stop[2]) if stop and src is not None else None
    if line is not None:
        return f"{line}: {stop[3]}; not run"
    return (
        f"lane: the release defines {name} ({where}) but run_runtime starts {', '.join(RUNTIME_ALGORITHMS)} only "
        "(no draft model of the kind it needs); not run"
    )


def backend_limit(name: str, info: dict) -> str | None:
    """Why backend ``name`` cannot run here (None: the real runtime runs it)."""
    if name in BACKENDS:
        return None
    section = info.get("section") or ""
    where = f"{info['line']}" + (f", under '# {section}'" if section else "")
    for key, reason in _SECTION_REASONS.items():
        if section.lower().startswith(key):
            return f"{where}: {reason}"
    if name in _BACKEND_REASONS:
        return f"{where}: {_BACKEND_REASONS[name]}"
    return f"{where}: lane: not among the backends run_runtime drives ({', '.join(BACKENDS)}); not run"


def enumerate_cells(
    axes: Axes,
    algorithms: Iterable[str] | None = None,
    backends: Iterable[str] | None = None,
    dps: Iterable[int] = DP_SIZES,
    src: Path | None = None,
) -> list[Cell]:
    """Every cell: one limit cell per algorithm or backend the real runtime cannot run, the product of the rest (each
    of those is run: what stops it, e.g. torch_native's verify pass, is measured, not predicted)."""
    algs = list(algorithms) if algorithms is not None else list(axes.algorithms)
    bks = list(backends) if backends is not None else list(axes.backends)
    cells: list[Cell] = []
    run_algs = []
    for a in algs:
        why = algorithm_limit(a, axes.algorithms[a], src)
        if why:
            cells.append(Cell(a, "*", "*", "*", "*", verdict="limit", reason=why))
        else:
            run_algs.append(a)
    run_bks = []
    for b in bks:
        why = backend_limit(b, axes.backends[b])
        if why:
            cells.append(Cell("*", b, "*", "*", "*", verdict="limit", reason=why))
        else:
            run_bks.append(b)
    for a in run_algs:
        for b in run_bks:
            for dp in dps:
                for idle in IDLE_MODES if dp > 1 else ("start",):
                    for overlap in (True, False):
                        cells.append(Cell(a, b, dp, idle, overlap))
    return cells


def known_crashes(version: str, path: Path = SHIPPED_RUNS, reports: Path = SHIPPED_REPORTS) -> list[dict]:
    """The crashes known for ``version`` (exception, phase, file, line, and where it is known from): those
    the shipped runtime records hold, and the as-released crash of each shipped upstream-ready report
    (``reports``/NAME-VERSION/result.json, written by ``python -m workbench.upstream.runtime.report``)."""
    out = []
    if path.is_file():
        for role, rec in json.loads(path.read_text()).get("runs", {}).items():
            c = rec.get("crash") or {}
            if rec.get("config", {}).get("sglang") == version and c:
                at = c.get("raised_at") or {}
                out.append(
                    {
                        "role": role,
                        "exception_type": c.get("exception_type"),
                        "phase": c.get("phase"),
                        "file": at.get("file"),
                        "line": at.get("line"),
                    }
                )
    for result in sorted(reports.glob(f"*-{version}/result.json")) if reports.is_dir() else []:
        doc = json.loads(result.read_text())
        c = ((doc.get("runs") or {}).get("as released") or {}).get("crash") or {}
        file, _, line = str(c.get("raised_at") or "").rpartition(":")
        if doc.get("release") == version and c and line.isdigit():
            out.append(
                {
                    "role": f"upstream report {doc.get('crash')}",
                    "exception_type": c.get("exception_type"),
                    "phase": c.get("phase"),
                    "file": file,
                    "line": int(line),
                }
            )
    return out


def reproducer(version: str, cell: Cell, max_new_tokens: int) -> str:
    """The ``workbench upstream run`` command line that runs ``cell`` alone."""
    cmd = f"workbench upstream run --sglang {version} --dp {cell.dp} --backend {cell.backend}"
    if cell.algorithm != "EAGLE3":
        cmd += f" --speculative-algorithm {cell.algorithm}"
    if cell.idle != "start":
        cmd += f" --idle {cell.idle}"
    if cell.overlap is False:
        cmd += " --disable-overlap-schedule"
    return cmd + f" --max-new-tokens {max_new_tokens} --json OUT"


def classify(rec: dict, known: list[dict]) -> dict:
    """A run record's cell verdict (``VERDICTS``): ``verdict``, ``reason``, ``crash`` (rank, phase, mode,
    file:line), ``known``."""
    status, crash = rec["status"], rec.get("crash")
    if rec.get("limits"):
        out = {"verdict": "limit", "reason": "; ".join(rec["limits"])}
        if crash:
            out["crash"] = _crash_summary(crash)
        return out
    if status == "ok":
        ref = rec.get("reference") or {}
        if ref.get("equal") is True:
            return {"verdict": "ok", "reason": "outputs equal to HF transformers' greedy tokens"}
        why = ref.get("error") or f"outputs differ from HF at {ref.get('first_difference')}"
        return {"verdict": "failed", "reason": why if ref.get("equal") is False else f"no HF comparison: {why}"}
    if status == "crashed":
        summary = _crash_summary(crash)
        match = next(
            (
                k
                for k in known
                if (k["exception_type"], k["file"], k["line"])
                == (summary["exception_type"], summary["file"], summary["line"])
                and (k["phase"] == summary["phase"] or None in (k["phase"], summary["phase"]))
            ),
            None,
        )
        return {
            "verdict": "crashed",
            "reason": f"{summary['exception_type']}: {summary['message']} at {summary['file']}:{summary['line']}",
            "crash": summary,
            "known": match is not None,
            "known_as": match["role"] if match else None,
        }
    err = rec.get("error") or {}
    if err.get("stage") == "shim-guard" or err.get("violations"):  # our tooling changed the release: never a limit
        return {"verdict": "failed", "reason": f"{status} at shim-guard: {err.get('message')}"}
    if status == "error" and err.get("stage") not in ("requests", "event_loop", "run", None):
        at = raised_at(err.get("traceback"))
        where = f" ({at})" if at else ""
        return {"verdict": "limit", "reason": f"set-up error at {err.get('stage')}: {err.get('message')}{where}"}
    return {"verdict": "failed", "reason": f"{status} at {err.get('stage')}: {err.get('message')}"}


def raised_at(traceback_text: str | None) -> str | None:
    """``sglang/...py:line`` of the innermost frame inside the release in a formatted traceback, or None."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', traceback_text or "")
    marker = f"{os.sep}sglang{os.sep}"
    inside = [(f, n) for f, n in frames if marker in f]
    if not inside:
        return None
    file, line = inside[-1]
    return f"sglang{os.sep}{file.split(marker, 1)[1]}:{line}"


def overlap_turned_off(rec: dict) -> bool:
    """Whether the release's scheduler ran without the overlap schedule the cell asked for (every rank that
    built its scheduler reports ``enable_overlap`` False)."""
    seen = [
        t.get("enable_overlap")
        for k, t in (rec.get("timings") or {}).items()
        if k.startswith("rank") and isinstance(t, dict) and "enable_overlap" in t
    ]
    return bool(seen) and not any(seen)


CRASH_SUMMARY = ("rank", "phase", "forward_mode", "batch_size", "exception_type", "message")


def _crash_summary(crash: dict) -> dict:
    """The run record's crash (``release_record.py`` builds it) cut to what a cell shows, with where it raised."""
    at = crash.get("raised_at") or {}
    return {**{k: crash.get(k) for k in CRASH_SUMMARY}, "file": at.get("file"), "line": at.get("line")}


def _shares_setup_error(cell: Cell, done: dict) -> Cell | None:
    """The ``start`` cell of the same configuration, when it failed before any request was sent.

    The idle mode changes only which requests the ranks are given, after the scheduler is built, so a
    set-up error of the ``start`` cell is the ``mid`` cell's too."""
    if cell.idle != "mid":
        return None
    twin = done.get(Cell(cell.algorithm, cell.backend, cell.dp, "start", cell.overlap).key)
    rec = twin.record if twin else None
    if (
        rec
        and rec["status"] == "error"
        and (rec.get("error") or {}).get("stage") not in ("requests", "event_loop", "run")
    ):
        return twin
    return None


def _overlap_witness(cell: Cell, done: dict, src: Path | None) -> tuple[Cell, str | None] | None:
    """(the first overlap-on cell already run whose scheduler ran without overlap, where the cell's algorithm's
    handler turns it off), or None: then the cell is run.

    The release decides the overlap schedule from the server arguments alone (on CPU, for speculative
    decoding), before any request. A measured cell stands for the others of its algorithm, and for those
    of another algorithm whose server-argument handler calls the same override (``calls_overlap_off``)."""
    if cell.overlap is not True:
        return None
    here = calls_overlap_off(src, cell.algorithm) if src is not None else None
    for other in done.values():
        if not (other.overlap is True and other.record and overlap_turned_off(other.record)):
            continue
        if other.algorithm == cell.algorithm:
            return other, None
        if here is not None and calls_overlap_off(src, other.algorithm) is not None:
            return other, here
    return None


def validate(
    ctx: UpstreamContext, version: str, algorithms: list[str] | None, backends: list[str] | None, dps: list[int] | None
) -> tuple[Path, Axes]:
    """The release's sources and axes; ExploreError (or ReleaseError) naming a bad value, before any rank starts."""
    check_version(version, known_releases(ctx))
    bad_dp = [d for d in dps or [] if d not in DP_SIZES]
    if bad_dp:
        raise ExploreError(f"bad dp {bad_dp!r}; valid: {', '.join(map(str, DP_SIZES))}")
    src = ensure_sources(ctx, version)
    axes = read_axes(src)
    for label, given, valid in (("algorithm", algorithms, axes.algorithms), ("backend", backends, axes.backends)):
        bad = [g for g in given or [] if g not in valid]
        if bad:
            raise ExploreError(f"bad {label} {bad!r} for sglang {version}; valid: {', '.join(valid)}")
    return src, axes


def explore(
    ctx: UpstreamContext,
    version: str,
    algorithms: list[str] | None = None,
    backends: list[str] | None = None,
    dps: list[int] | None = None,
    max_new_tokens: int = 8,
    timeout_s: float = 240,
    progress: Callable[[Cell], None] | None = None,
    command: str | None = None,
    on_cells: Callable[[int], None] | None = None,
) -> dict:
    """Run every runnable cell of ``version`` (optionally only the named algorithms, backends, DP sizes).

    Returns ``{"sglang", "provenance", "axes", "cells", "counts", "wall_s"}``; each cell as ``Cell``
    (with its run record when it ran). ``on_cells`` gets the number of cells once they are known,
    ``progress`` each cell when it is decided.
    """
    t0 = time.perf_counter()
    started = provenance(command)  # the commit and the load when the cells start, not when they end
    src, axes = validate(ctx, version, algorithms, backends, dps)
    cells = enumerate_cells(axes, algorithms, backends, dps or DP_SIZES, src)
    overlap_line = release_line(src, *_OVERLAP_OFF)
    known = known_crashes(version)
    if on_cells:
        on_cells(len(cells))
    reference: dict | None = None
    done: dict = {}
    for cell in cells:
        if cell.verdict is None:
            twin = _shares_setup_error(cell, done)
            witness = _overlap_witness(cell, done, src)
            if twin is not None:
                cell.verdict = "limit"
                cell.reason = f"as {twin.key} ({twin.reason}); the idle mode changes only the requests, sent later"
            elif witness is not None:
                other, call = witness
                via = f" ({cell.algorithm}'s handler calls the same override at {call})" if call else ""
                cell.verdict = "limit"
                cell.reason = f"as {other.key}: the release turns the overlap schedule off here{via}; not run"
            else:
                _run_cell(ctx, version, cell, max_new_tokens, timeout_s, known)
                if cell.record and cell.record["status"] == "ok":
                    reference = reference or _hf_reference(ctx, version, max_new_tokens, timeout_s)
                    rec = from_dict(RuntimeRecord, cell.record)
                    check_reference(rec, reference)
                    cell.record = to_dict(rec)
                    _apply(cell, classify(cell.record, known), version, max_new_tokens)
                if cell.overlap is True and cell.record and overlap_turned_off(cell.record):
                    where = overlap_line or "the release's server-argument handling"
                    cell.verdict, ran_as = "limit", f"{cell.verdict}: {cell.reason}"
                    cell.reason = (
                        f"{where}: the release turns the overlap schedule off for speculative decoding on CPU "
                        f"(its scheduler ran with enable_overlap False); the run, as overlap-off: {ran_as}"
                    )
                    cell.reproducer = None
        done[cell.key] = cell
        if progress:
            progress(cell)
    counts = {o: sum(1 for c in cells if c.verdict == o) for o in VERDICTS}
    return {
        "sglang": version,
        "provenance": started,
        "axes": {
            "algorithms": axes.algorithms,
            "backends": axes.backends,
            "dp": list(dps or DP_SIZES),
            "idle": list(IDLE_MODES),
            "overlap": [True, False],
            "max_new_tokens": max_new_tokens,
        },
        "cells": [{"key": c.key, **to_dict(c)} for c in cells],
        "counts": counts,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _apply(cell: Cell, result: dict, version: str, max_new_tokens: int) -> None:
    cell.verdict, cell.reason = result["verdict"], result["reason"]
    cell.crash, cell.known = result.get("crash"), result.get("known")
    if cell.verdict == "crashed" and not cell.known:
        cell.reproducer = reproducer(version, cell, max_new_tokens)


def _run_cell(
    ctx: UpstreamContext, version: str, cell: Cell, max_new_tokens: int, timeout_s: float, known: list[dict]
) -> None:
    t = time.perf_counter()
    rec = run_runtime(
        ctx,
        version,
        dp=int(cell.dp),
        backend=cell.backend,
        algorithm=cell.algorithm,
        max_new_tokens=max_new_tokens,
        reference=False,
        disable_overlap_schedule=not cell.overlap,
        timeout_s=timeout_s,
        idle=cell.idle,
    )
    cell.record, cell.wall_s = rec, round(time.perf_counter() - t, 1)
    _apply(cell, classify(rec, known), version, max_new_tokens)


def _hf_reference(ctx: UpstreamContext, version: str, max_new_tokens: int, timeout_s: float) -> dict:
    """HF transformers' greedy tokens for the real runtime's prompt, computed once for every ok cell."""
    env = ensure_env(ctx, version)
    prompts = [list(t.encode("utf-8")) for t in load_prompts(1)]
    run_dir = Path(tempfile.mkdtemp(prefix="wb-rt-"))
    try:
        return _reference(env.python, run_dir, prompts, max_new_tokens, timeout_s)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def merge(parts: list[dict]) -> dict:
    """One exploration from parts of the same release run as separate processes (``--algorithm`` /
    ``--backend`` subsets): their cells in order, a cell two parts share (a backend limit) once, the counts
    recomputed, ``provenance`` the first part's with every part's own under ``parts``, ``wall_s`` the longest."""
    releases = {p["sglang"] for p in parts}
    if len(releases) != 1:
        raise ExploreError(f"bad parts: releases {sorted(releases)}; valid: parts of one release")
    cells, seen = [], set()
    for part in parts:
        for c in map(read_cell, part["cells"]):
            if c["key"] not in seen:
                seen.add(c["key"])
                cells.append(c)
    axes = dict(parts[0]["axes"])
    axes["dp"] = sorted({d for p in parts for d in p["axes"]["dp"]})
    return {
        "sglang": parts[0]["sglang"],
        "provenance": {
            **parts[0]["provenance"],
            "command": " & ".join(p["provenance"]["command"] for p in parts),
            "parts": [{**p["provenance"], "wall_s": p["wall_s"], "cells": len(p["cells"])} for p in parts],
        },
        "axes": axes,
        "cells": cells,
        "counts": {o: sum(1 for c in cells if c["verdict"] == o) for o in VERDICTS},
        "wall_s": max(p["wall_s"] for p in parts),
    }


def provenance(command: str | None) -> dict:
    """When, where and with which commit the exploration ran."""
    return {
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": command or " ".join(sys.argv),
        "commit": workbench_commit(),
        "cpus": os.cpu_count(),
        "load_at_start": round(os.getloadavg()[0], 2),
    }


def read_cell(cell: dict) -> dict:
    """One cell's JSON form, written now or before ``verdict`` was named: a cell written before says
    ``outcome`` (the same four words), read as its ``verdict``; a verdict outside ``VERDICTS`` is refused."""
    if "outcome" in cell and "verdict" not in cell:
        cell = {("verdict" if k == "outcome" else k): v for k, v in cell.items()}
    if cell.get("verdict") not in VERDICTS:
        raise ExploreError(f"cell {cell.get('key')!r}: verdict {cell.get('verdict')!r}; valid: {', '.join(VERDICTS)}")
    return cell


def load_shipped(path: Path = SHIPPED_EXPLORE) -> dict:
    """The shipped exploration (``workbench/assets/runtime_explore.json``), labelled ``source: shipped``;
    its cells read by ``read_cell`` (the shipped file was written before ``verdict`` was named)."""
    result = json.loads(Path(path).read_text())
    result["cells"] = [read_cell(c) for c in result["cells"]]
    p = result["provenance"]
    result["source"] = (
        f"shipped: sglang {result['sglang']}, {p['generated_at']}, commit {p['commit']}, `{p['command']}`, "
        f"{result['wall_s']} s at load {p['load_at_start']} on {p['cpus']} cores"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m workbench.upstream.runtime.explore --merge PART.json ... --json OUT``: one
    exploration from parts that ``workbench upstream explore`` wrote for one release (``merge``)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--merge", nargs="+", type=Path, required=True, metavar="PART", help="the parts' --json files")
    ap.add_argument("--json", type=Path, required=True, dest="json_out", help="write the one exploration here")
    args = ap.parse_args(argv)
    try:
        result = merge([json.loads(p.read_text()) for p in args.merge])
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot merge {[str(p) for p in args.merge]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(result['cells'])} cells, {result['counts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
