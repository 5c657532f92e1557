"""One replay case: a real backend's ``init_forward_metadata`` on a real batch of one kind whose
``spec_info`` is a real instance of one spec-input class.

A case runs up to ``MAX_ANSWERS + 1`` times. When a run raises ``AttributeError`` for an attribute
the spec class lacks, the next run gives the class that attribute as a class-level default
``None`` (the smallest fix) and goes on, so a read behind the first crash is decided too; when the
code then uses such a None (a ``'NoneType'`` error: calls or indexes it), the next run answers the
batch's own values instead (``inputs.value_for``: ``kv_indptr`` = ``[0, cumsum(seq_lens)]``, ...). Each run
lists what it answered. Lines of the watched files (the findings' reads) that ran are recorded
by a trace function scoped to those files. A traced case (a backend whose metadata needs a GPU
library) stubs the library (``stubs``) and wraps the spec input in the recording proxy (``proxy``).
"""

from __future__ import annotations

import importlib
import re
import signal
import sys
import traceback

from ...in_release import stubs
from ...in_release.devices import CudaToCpu
from .batches import fill_rows, make_batch, shape_of
from .idle import IdlePathError, idle_path, run_idle
from .inputs import build, spec_class
from .proxy import SpecProxy, reads_of

MAX_ANSWERS = 4
_MISSING = re.compile(r"^'(\w+)' object has no attribute '(\w+)'")


class CaseTimeout(Exception):
    """The case ran past its time limit."""


def rel(path: str) -> str | None:
    path = path.replace("\\", "/")
    return "sglang/" + path.rsplit("/sglang/", 1)[1] if "/sglang/" in path else None


def sglang_frames(tb) -> list[dict]:
    return [
        {"at": f"{rel(f.filename)}:{f.lineno}", "function": f.name, "code": (f.line or "").strip()}
        for f in traceback.extract_tb(tb)
        if rel(f.filename)
    ]


def crashed(exc: BaseException, frames_kept: int = 6) -> dict:
    """A run's fields for the release's code raising `exc`: status ``crashed``, the exception, its message,
    the innermost sglang frame it was raised at, the last `frames_kept` sglang frames and the traceback."""
    frames = sglang_frames(exc.__traceback__)
    return {
        "status": "crashed",
        "exception": type(exc).__name__,
        "message": str(exc),
        "raised_at": frames[-1]["at"] if frames else None,
        "frames": frames[-frames_kept:],
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


class LineWatch:
    """Records which of the watched `file:line`s run, and which functions of those files were
    entered (`file:qualname`), by a trace function scoped to those files."""

    def __init__(self, watch: list[str]):
        self.want: dict[str, set[int]] = {}
        for w in watch:
            f, _, line = w.rpartition(":")
            self.want.setdefault(f, set()).add(int(line))
        self.ran: set[str] = set()
        self.entered: set[str] = set()

    def _global(self, frame, event, arg):
        f = rel(frame.f_code.co_filename)
        if f not in self.want:
            return None
        self.entered.add(f"{f}:{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}")
        return self._local

    def _local(self, frame, event, arg):
        if event == "line":
            f = rel(frame.f_code.co_filename)
            if frame.f_lineno in self.want.get(f, ()):
                self.ran.add(f"{f}:{frame.f_lineno}")
        return self._local

    def __enter__(self):
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(None)


def import_backend(case: dict, stand_ins: list) -> type:
    """The backend class; a traced case stubs its GPU libraries first. A GPU library found missing
    at import (``sgl_kernel`` imported by a module the backend imports) is stubbed too, in a real
    case as well: there it must never be called (a call ends the run: the verdict is unverified)."""
    libs = set(case.get("stub") or [])
    if libs:
        stubs.install(libs)
        _available(libs, stand_ins)
    for _ in range(8):
        try:
            return getattr(importlib.import_module(case["backend_module"]), case["backend_class"])
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if not top or top in stubs.STATE.stubbed or top in ("sglang", "torch"):
                raise
            stubs.install({top})
            _available({top}, stand_ins)
    raise ImportError(f"{case['backend_module']}: too many missing GPU libraries ({sorted(stubs.STATE.stubbed)})")


def _available(libs: set[str], stand_ins: list) -> None:
    """`is_<lib>_available()` answered True (it also asks for CUDA), so the import takes the library."""
    for name in sorted(libs):
        for mod in ("sglang.srt.utils", "sglang.srt.utils.common"):
            m = sys.modules.get(mod) or importlib.import_module(mod)
            if hasattr(m, f"is_{name}_available"):
                setattr(m, f"is_{name}_available", lambda: True)
                stubs.STATE.answered.add(f"{mod}.is_{name}_available()")


def construct(backend_cls: type, runner, case: dict, stand_ins: list):
    """`backend_cls(runner)`; a traced case stubs a GPU library its constructor imports late."""
    for _ in range(8):
        stubs.STATE.built.clear()
        try:
            return backend_cls(runner)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            if not top or top in stubs.STATE.stubbed or top in ("sglang", "torch"):
                raise
            stubs.install({top})
            _available({top}, stand_ins)
    raise ImportError(f"{case['backend_class']}: too many missing GPU libraries ({sorted(stubs.STATE.stubbed)})")


def run_case(ctx, case: dict, bundle: dict | None = None) -> dict:
    """All runs of one case; never raises (failures become records)."""
    out: dict = {"case": case, "runs": [], "stand_ins": [], "stage": "backend"}
    answers: dict[str, str] = {}  # attribute -> "None" | "the batch's value"
    cls = None
    try:
        ctx.runner = ctx.runner_for(case.get("model", "mha"))
        for key in ("prefill_attention_backend_str", "decode_attention_backend_str"):
            setattr(ctx.runner, key, case.get("backend", "triton"))  # what the runner resolved --attention-backend to
        backend_cls = import_backend(case, out["stand_ins"])
        cls = spec_class(case["spec_module"], case["spec_class"])
        limit = MAX_ANSWERS if case.get("answer_missing", True) else 0
        while True:
            run = _run_once(ctx, case, backend_cls, bundle, out)
            run["answered"] = [f"{k}={v}" for k, v in answers.items()]
            out["runs"].append(run)
            if len(out["runs"]) > limit:
                break
            missing = run.get("missing_attr")
            if missing is not None and missing not in answers:
                setattr(cls, missing, None)  # the smallest fix: a class-level default None
                answers[missing] = "None"
                continue
            # the code used a None it was answered (dereferenced or called it): answer the batch's own values
            if run["status"] != "crashed" or "NoneType" not in run.get("message", ""):
                break
            values = {a: _value(ctx, case, a, bundle) for a, v in answers.items() if v == "None"}
            values = {a: v for a, v in values.items() if v is not None}
            if not values:
                break
            for attr, value in values.items():
                setattr(cls, attr, value)
                answers[attr] = "the batch's value"
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a record
        out.update(error=f"{type(exc).__name__}: {exc}", frames=sglang_frames(exc.__traceback__))
    finally:
        for name in answers:
            delattr(cls, name)
    if case.get("trace") or stubs.STATE.stubbed:
        out["stand_ins"] += [
            f"{lib} stubbed (GpuLibraryReached on first use during the metadata)" for lib in sorted(stubs.STATE.stubbed)
        ]
        out["stand_ins"] += [a if " = " in a else f"{a} answered True" for a in sorted(stubs.STATE.answered)]
    return out


def _run_once(ctx, case: dict, backend_cls: type, bundle: dict | None, out: dict) -> dict:
    kind, mode = case["batch"], case["mode"]
    shape = {**shape_of(kind, bundle), "mode": mode, "spec_class": case["spec_class"]}
    rows = fill_rows(ctx, bundle)
    stubs.STATE.stand_in = bool(case.get("stand_in"))
    stubs.STATE.passed.clear()
    redirect = CudaToCpu()
    out["stage"] = "backend"
    with redirect:
        backend = construct(backend_cls, ctx.runner, case, out["stand_ins"])
        ctx.runner.attn_backend = backend
        out["stage"] = "spec_info"
        spec, out["built_by"] = build(ctx, case["spec_module"], case["spec_class"], mode == "IDLE", shape, out)
        out["stage"] = "batch"
        batch, out["notes"] = make_batch(
            ctx, mode, kind, spec, shape, bundle, case.get("batch_none") or [], case.get("batch_none_after") or []
        )
    if case.get("trace"):
        batch.spec_info = SpecProxy(spec)
    out["batch"] = {
        "kind": kind,
        # None after the padding (an oracle mutant's `batch_none_after`): recorded as None
        "seq_lens": None if batch.seq_lens is None else batch.seq_lens.tolist(),
        "req_pool_indices": None if batch.req_pool_indices is None else batch.req_pool_indices.tolist(),
        "batch_size": batch.batch_size,
        "req_to_token_rows": {str(r): list(slots) for r, slots in rows.items()},
    }
    out["stage"] = "init_forward_metadata"
    run: dict = {"status": "ok"}  # `run_end` names the words
    watch = LineWatch(case.get("watch") or [])
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(case.get("timeout_s", 120)))
    try:
        with redirect, watch, stubs.armed():
            _execute(ctx, backend, batch, kind, run)
        if run["status"] == "ok" and "stopped_at" not in run:
            run["metrics"] = _metrics(backend, batch.batch_size)
    except stubs.GpuLibraryReached as exc:
        run.update(status="ok", stopped_at="library call", library_call=exc.library_call, raised_at=exc.where)
    except CaseTimeout:
        run.update(status="timeout", exception="CaseTimeout", message=f"ran past {case.get('timeout_s', 120)} s")
    except Exception as exc:  # noqa: BLE001
        run.update(crashed(exc))
        found = _MISSING.match(str(exc)) if isinstance(exc, AttributeError) else None
        if found and found.group(1) == case["spec_class"]:
            run["missing_attr"] = found.group(2)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    run["ran"] = sorted(watch.ran)
    run["entered"] = sorted(watch.entered)
    if stubs.STATE.stand_in or stubs.STATE.passed:  # a model stand-in's calls are listed in every case
        run["library_passed"] = list(stubs.STATE.passed)
    if case.get("trace"):
        run["reads"] = [
            f"{r['attr']}@{r['at']}" + (" (missing)" if r["missing"] else "") for r in reads_of(batch.spec_info)
        ]
        run["library_built"] = sorted(set(stubs.STATE.built))
    if redirect.redirected and not any(n.startswith("device='cuda'") for n in out["stand_ins"]):
        out["stand_ins"].append(f"device='cuda' redirected to cpu ({', '.join(sorted(set(redirect.redirected)))})")
    return run


def _value(ctx, case: dict, attr: str, bundle: dict | None):
    """A value of `attr` consistent with the case's batch (`inputs.value_for`), or None."""
    from .inputs import _known, value_for  # on use: only a replay that answers an attribute fills one

    shape = {**shape_of(case["batch"], bundle), "mode": case["mode"], "spec_class": case["spec_class"]}
    if not shape["seq_lens"] and case["batch"] == "IDLE padded":
        shape.update(seq_lens=[1, 1], req_pool_indices=[0, 0])  # the padding's rows
    value = value_for(ctx, attr, None, _known(ctx), shape)
    return None if callable(value) and not hasattr(value, "shape") else value


def _execute(ctx, backend, batch, kind: str, run: dict) -> None:
    """The metadata call: idle batches through the release's idle runner path (``idle``)."""
    if not kind.startswith("IDLE"):
        backend.init_forward_metadata(batch)
        return
    run["idle_path"] = {"path": idle_path()[0], "metadata_called": None}
    try:
        run["idle_path"] = run_idle(ctx.runner, backend, batch)
    except IdlePathError as exc:
        run["idle_path"] = {"path": None, "error": str(exc), "raised_at": exc.raised_at}
        if kind != "IDLE padded":
            run.update(status="error", exception="IdlePathError", message=str(exc))
            return
        backend.init_forward_metadata(batch)  # the padded batch still goes to the backend, as the runner sends it
        return
    if not run["idle_path"]["metadata_called"]:
        run["stopped_at"] = "no metadata call"
        run["message"] = f"{run['idle_path']['path']} does not call init_forward_metadata on this batch"


def _alarm(signum, frame):
    raise CaseTimeout()


def _metrics(backend, bs: int) -> dict:
    meta = getattr(backend, "forward_metadata", None)
    indptr = getattr(meta, "kv_indptr", None)
    if indptr is None or not hasattr(indptr, "tolist"):
        return {}
    out = {"kv_indptr": indptr[: bs + 1].tolist()}
    indices = getattr(meta, "kv_indices", None)
    if indices is not None and bs < len(indptr):
        out["kv_indices"] = indices[: int(indptr[bs])].tolist()
    return out
