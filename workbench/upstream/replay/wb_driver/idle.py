"""An idle batch through the release's own idle runner path, not straight into the backend.

0.5.14 and later run idle batches in ``EagerRunner._execute_idle``, earlier releases in
``ModelRunner.forward_idle``; both call ``attn_backend.init_forward_metadata`` only when the batch
was padded (``batch_size > 0``, DP attention) and drop the metadata otherwise. Here that function
runs on the replay's runner object with ``SGLANG_EAGER_INPUT_NO_COPY=1`` (the release's own switch
that makes ``load_batch`` hand the batch through instead of copying it into eager static buffers)
and a model stand-in whose ``forward`` returns None (nothing after the metadata is replayed),
inside the forward context later releases' model runner opens around it.
"""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace


class IdlePathError(RuntimeError):
    """The idle runner path failed before reaching the metadata (the replay's runner lacks something);
    `raised_at`: the innermost sglang `file:line` of the failure."""

    def __init__(self, message: str, raised_at: str | None = None):
        super().__init__(message)
        self.raised_at = raised_at


def _raised_at(exc: BaseException) -> str | None:
    """The innermost `sglang/...py:LINE` of an exception's traceback."""
    at, tb = None, exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/sglang/" in path:
            at = "sglang/" + path.rsplit("/sglang/", 1)[1] + f":{tb.tb_lineno}"
        tb = tb.tb_next
    return at


class StandInModel:
    """The model stand-in of the replay's runner: no layers (no weights are loaded); ``forward``
    returns None (nothing after the metadata is replayed). A call is listed with the arguments that
    were None, as a GPU library stand-in's is (``stubs.STATE.passed``): a real model may crash on a
    None input; a stand-in cannot say."""

    def forward(self, *args, **kwargs):
        from ...in_release import stubs  # on use: the stand-in's record of calls lives there

        nones = [str(i) for i, a in enumerate(args) if a is None] + [k for k, v in kwargs.items() if v is None]
        stubs.STATE.passed.append(
            f"model stand-in forward at {stubs.caller()}" + (f" [None: {', '.join(nones)}]" if nones else "")
        )
        return None

    def modules(self):
        return iter(())


def idle_path():
    """(name, function(runner, batch)) of the release's idle runner path."""
    try:
        from sglang.srt.model_executor.runner.eager_runner import EagerRunner
    except ImportError:
        from sglang.srt.model_executor.model_runner import ModelRunner

        return "ModelRunner.forward_idle", lambda runner, batch: ModelRunner.forward_idle(runner, batch)

    def call(runner, batch):
        obj = EagerRunner.__new__(EagerRunner)
        obj.model_runner = runner
        obj.enable_pdmux = False
        return EagerRunner._execute_idle(obj, batch)

    return "EagerRunner._execute_idle", call


def run_idle(runner, backend, batch) -> dict:
    """Run the idle path; {"path", "metadata_called", "after_metadata", "after_at"}. Exceptions from
    the metadata propagate; one before it is an `IdlePathError`; one after it is recorded (with
    where it was raised), not raised."""
    os.environ["SGLANG_EAGER_INPUT_NO_COPY"] = "1"
    name, call = idle_path()
    calls: list[int] = []
    real = backend.init_forward_metadata

    def spy(forward_batch):
        calls.append(forward_batch.batch_size)
        return real(forward_batch)

    backend.init_forward_metadata = spy
    for key, value in (
        ("model", StandInModel()),
        ("support_pp", False),
        ("device_timer", None),
        ("_pp_kwargs", lambda pp=None: {}),
    ):
        if not hasattr(runner, key):
            setattr(runner, key, value)
    runner.attn_backend = backend
    out = SimpleNamespace(path=name, after=None, at=None)
    try:
        with _forward_context(backend):
            call(runner, batch)
    except Exception as exc:  # noqa: BLE001
        if _from_metadata(exc):
            raise
        if not calls:
            raise IdlePathError(
                f"{name} failed before the metadata: {type(exc).__name__}: {exc}", _raised_at(exc)
            ) from exc
        out.after, out.at = f"{type(exc).__name__}: {exc}", _raised_at(exc)
    finally:
        del backend.init_forward_metadata
    return {"path": name, "metadata_called": bool(calls), "after_metadata": out.after, "after_at": out.at}


def _forward_context(backend):
    """The per-forward context later releases' model runner opens around the runner (0.5.2x's
    ``forward_context(ForwardContext(attn_backend=...))``); nothing where the release has none."""
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ImportError:
        return contextlib.nullcontext()
    return forward_context(ForwardContext(attn_backend=backend))


def _from_metadata(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "spy":
            return True
        tb = tb.tb_next
    return False
