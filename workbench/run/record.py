"""The run record: ``RunRecord`` (a dataclass; JSON through ``workbench.run.serialise``), ``RunResult``
around it, the one constructor of its ``crash`` entry that every producer uses (rank runner, DP
collector, torchrun merge, upstream replay), and ``RankReport``, what one rank reports at its end.

Light on purpose (torch is imported only when a record is built): the nightly imports the status
names and crash fields from here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import traceback as traceback_mod
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from workbench.engine.metrics import Metrics, loop_summary
from workbench.run.provenance import workbench_commit
from workbench.run.serialise import from_dict, to_dict

if TYPE_CHECKING:
    from workbench.run.config import RunConfig

# How a run ended: its ``status``, one field and one set of words everywhere (run records, real-runtime
# records, notebook executions; see docs/design.md): ok (it ran to its end), crashed (the code under
# test raised), timeout (it ran past its deadline), killed (its process died or was killed from
# outside), error (it could not run: a set-up step, the environment or the harness failed).
Status = Literal["ok", "crashed", "timeout", "killed", "error"]
STATUSES: tuple[str, ...] = get_args(Status)


@dataclass
class Crash:
    """The ``crash`` entry of a run record, the one every producer builds (``crash_record``).

    rank: the DP rank (None: no one rank, e.g. a whole-run timeout); phase / forward_mode /
    batch_size: the forward pass it was in; time: epoch seconds when raised (orders the ranks'
    failures); raised_at: {file, line, function, code} of the innermost frame; bundle: path of a
    crash bundle, if one was written.
    """

    rank: int | None
    phase: str | None
    forward_mode: str | None
    batch_size: int | None
    exception_type: str
    message: str
    traceback: str | None = None
    time: float | None = None
    raised_at: dict | None = None
    bundle: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.exception_type, str) or not self.exception_type:
            raise ValueError(f"invalid exception_type {self.exception_type!r}; valid: an exception class name")
        self.message = str(self.message)


CRASH_FIELDS = tuple(f.name for f in fields(Crash))


def crash_record(
    *,
    rank: int | None,
    phase: str | None,
    forward_mode: str | None,
    batch_size: int | None,
    exception_type: str,
    message: str,
    traceback: str | None = None,
    time: float | None = None,
    raised_at: dict | None = None,
    bundle: str | None = None,
) -> dict:
    """The JSON form (keys ``CRASH_FIELDS``) of a ``Crash`` with these fields."""
    return to_dict(
        Crash(rank, phase, forward_mode, batch_size, exception_type, message, traceback, time, raised_at, bundle)
    )


def raised_at(exc: BaseException) -> dict | None:
    """{file, line, function, code} of the innermost frame of ``exc``'s traceback."""
    frames = traceback_mod.extract_tb(exc.__traceback__)
    if not frames:
        return None
    f = frames[-1]
    return {
        "file": os.path.relpath(f.filename) if f.filename.startswith(os.getcwd()) else f.filename,
        "line": f.lineno,
        "function": f.name,
        "code": f.line,
    }


def crash_from_exception(
    exc: BaseException, *, rank: int | None, where: dict, time: float | None = None, bundle: str | None = None
) -> Crash:
    """The ``Crash`` of a caught exception; ``where`` holds phase, forward_mode, batch_size."""
    return Crash(
        rank=rank,
        phase=where.get("phase"),
        forward_mode=where.get("forward_mode"),
        batch_size=where.get("batch_size"),
        exception_type=type(exc).__name__,
        message=str(exc),
        traceback="".join(traceback_mod.format_exception(exc)),
        time=time,
        raised_at=raised_at(exc),
        bundle=bundle,
    )


def outputs_sha256(outputs: list[list[int] | None]) -> str:
    """sha256 over the generated token ids of all prompts, in prompt order."""
    return hashlib.sha256(json.dumps(outputs, separators=(",", ":")).encode()).hexdigest()


def environment(backend_kernel: str | None, device: str | None = None) -> dict:
    """Versions, platform and the workbench's commit, and how the run's kernels executed; ``device``
    is where the run's tensors were (``gpu`` only names a GPU the machine has)."""
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "device": device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "kernel": backend_kernel,
    }
    try:
        env["triton"] = importlib.metadata.version("triton")  # metadata only: importing triton here would
    except importlib.metadata.PackageNotFoundError:  # pre-empt kernels' interpreter selection
        env["triton"] = None
    # whether this run's Triton kernels ran in the interpreter (only the triton backend runs them)
    env["triton_interpret"] = bool(backend_kernel) and "interpreter" in backend_kernel
    env["workbench_commit"] = workbench_commit()  # the code that ran (``+dirty``: with uncommitted changes)
    return env


@dataclass
class RankReport:
    """What one rank reports at its end (``run_rank``; a DP rank sends it as its ``done`` event).

    outputs: token ids by prompt index; crash: None or the rank's crash; kernel / kernel_stand_in /
    device / torch_threads: what computed; wall_s, setup_s (before the first prefill), warmup_s,
    generation_s (first prefill to last token) in seconds; gen_start / gen_end: epoch seconds of both
    ends (DP merges ranks with them); slots_free / slots_capacity: the KV pool at the end (None when
    the run did not get there). ``metrics`` stays in the rank's process; a DP rank sends its samples
    (``Metrics.export_samples``) and accept lengths instead.
    """

    outputs: dict[int, list[int]] = field(default_factory=dict)
    crash: Crash | None = None
    kernel: str | None = None
    kernel_stand_in: bool | None = None
    device: str | None = None
    torch_threads: int | None = None
    warmup_s: float | None = None
    wall_s: float | None = None
    setup_s: float | None = None
    generation_s: float | None = None
    gen_start: float | None = None
    gen_end: float | None = None
    slots_free: int | None = None
    slots_capacity: int | None = None
    samples: dict | None = None
    accepts: list[int] | None = None
    metrics: Metrics | None = field(default=None, repr=False)

    def to_event(self) -> dict:
        """The JSON form a DP rank streams (``metrics`` left out: it is sent as ``samples``)."""
        out = to_dict(self)
        del out["metrics"]
        return out

    @classmethod
    def from_event(cls, payload: dict) -> RankReport:
        """A report read back from a rank's ``done`` event (JSON turned the prompt indices to strings)."""
        data = {**payload, "outputs": {int(k): v for k, v in (payload.get("outputs") or {}).items()}}
        return from_dict(cls, data)


@dataclass
class DPInfo:
    """The ``dp`` entry of a DP run's record: how prompts were assigned, which ranks reported, every
    rank's failure (``rank_failures``; the record's ``crash`` is the primary one), the last forward each
    rank started (by rank, as a string), each rank's set-up seconds, and where the rank logs were kept."""

    assignment: list[list[int]]
    init_method: str
    logs: str | None
    ranks_reported: list[int]
    rank_failures: list[Crash]
    last_forward: dict[str, dict]
    rank_setup_s: dict[str, float | None] = field(default_factory=dict)
    port_attempts: int | None = None


@dataclass
class RunRecord:
    """One run's record: how it ended (``status``), its config (the ``RunConfig`` fields plus prompts,
    kernel, kernel_stand_in, models_sha256), the crash (None when none), metrics, outputs by prompt,
    their sha256 (None after a crash), the environment, and for DP runs ``dp`` and the KV slots leaked.
    ``to_json`` / ``from_json`` are its one JSON form (``workbench.run.serialise``)."""

    status: Status
    config: dict
    crash: Crash | None
    metrics: dict
    outputs: list[list[int] | None]
    outputs_sha256: str | None
    env: dict
    dp: DPInfo | None = None
    slots_leaked: int | None = None

    def to_json(self) -> dict:
        """The record as JSON-ready dicts."""
        return to_dict(self)

    @classmethod
    def from_json(cls, data: dict) -> RunRecord:
        """The record of its JSON form, read strictly (``RecordError`` names a bad field)."""
        return from_dict(cls, data)

    def failures(self) -> list[Crash]:
        """The primary crash first, then every rank's failure (DP runs)."""
        return [c for c in [self.crash, *(self.dp.rank_failures if self.dp else [])] if c is not None]


def build_record(
    cfg: RunConfig,
    prompts: list[str],
    outputs: dict[int, list[int]],
    metrics: Metrics,
    wall_s: float,
    crash: Crash | None,
    kernel: str | None,
    kernel_stand_in: bool | None,
    status: str | None = None,
    dp: DPInfo | None = None,
    slots_leaked: int | None = None,
    timing: RankReport | dict | None = None,
) -> RunRecord:
    """The run record of ``cfg`` over ``prompts``; ``status`` (one of STATUSES) defaults from ``crash``;
    ``timing``: generation_s, setup_s, warmup_s, device and torch_threads, a rank's report or the DP
    collector's merge of them."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"invalid status {status!r}; valid: {', '.join(STATUSES)}")
    if isinstance(timing, RankReport):
        timing = {k: getattr(timing, k) for k in ("generation_s", "setup_s", "warmup_s", "device", "torch_threads")}
    t = timing or {}
    ordered = [outputs.get(i) for i in range(len(prompts))]
    tokens = sum(len(o) for o in ordered if o)
    from workbench.models.loader import models_sha256  # torch: not at import (the nightly's merge runs without it)

    config = cfg.to_dict()
    config.update(
        prompts=prompts, kernel=kernel, kernel_stand_in=kernel_stand_in, models_sha256=models_sha256(cfg.model_dir)
    )
    return RunRecord(
        status=status or ("ok" if not crash else "error" if crash.phase == "setup" else "crashed"),
        config=config,
        crash=crash,
        metrics={
            **metrics.summary(tokens, wall_s, t.get("generation_s"), t.get("setup_s")),
            "warmup_s": t.get("warmup_s"),
            "repetition_loops": loop_summary(ordered),
        },
        outputs=ordered,
        outputs_sha256=outputs_sha256(ordered) if not crash else None,
        env={**environment(kernel, t.get("device")), "torch_threads": t.get("torch_threads")},
        dp=dp,
        slots_leaked=slots_leaked,
    )


RecordLike = RunRecord | dict | Any  # a run record, its JSON form, or a RunResult


def as_record(run: RecordLike) -> RunRecord:
    """The run record of a RunResult, a record, or a record's JSON form (read strictly)."""
    if isinstance(run, RunRecord):
        return run
    if isinstance(run, dict):
        return RunRecord.from_json(run)
    return run.record


def record_json(run: RecordLike) -> dict:
    """The JSON form of a RunResult, a record, or a record's JSON form (returned as it is)."""
    return run if isinstance(run, dict) else as_record(run).to_json()


@dataclass
class RunResult:
    """A run record with conveniences for notebooks. It renders nothing itself: Jupyter's HTML comes
    from ``html_view``, which the faces set to ``workbench.views.display.run_html``."""

    record: RunRecord
    html_view: ClassVar[Callable[[RunRecord], str] | None] = None

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def crash(self) -> Crash | None:
        return self.record.crash

    @property
    def metrics(self) -> dict:
        return self.record.metrics

    def __repr__(self) -> str:
        return f"RunResult: {self.summary()}"

    def _repr_html_(self) -> str | None:
        """The registered view of the record; None (Jupyter then shows ``repr``) when no face set one."""
        view = type(self).html_view
        return None if view is None else view(self.record)

    def replay_crash(self, fix: bool = False, rank: int | None = None):
        """Replay this run's crash bundle in-process (``workbench.debug.replay.replay_crash``); ``rank``
        picks another failed rank's bundle. Raises the recorded exception, or returns a ReplayResult."""
        # torch and the backends load only for a replay: ci and the views import this module for its names
        from workbench.debug.replay import replay_crash

        crashes = self.record.failures()
        chosen = next((c for c in crashes if (rank is None or c.rank == rank) and c.bundle), None)
        if chosen is None:
            have = sorted({c.rank for c in crashes if c.bundle}, key=str)
            raise ValueError(f"no crash bundle for rank {rank} in this run (ranks with bundles: {have})")
        return replay_crash(chosen.bundle, fix=fix)

    def save(self, path: str) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.record.to_json(), indent=1))
        return p

    def summary(self) -> str:
        c, m = self.record.config, self.metrics
        head = (
            f"[{self.status}] backend={c['backend']} ({c.get('kernel')}) revision={c['revision']} dp={c['dp']} "
            f"steps={c['steps']} topk={c['topk']} draft_tokens={c['draft_tokens']}"
        )
        if self.crash:
            cr = self.crash
            return (
                head + f"\n  rank {cr.rank} phase {cr.phase} mode {cr.forward_mode} bs {cr.batch_size}: "
                f"{cr.exception_type}: {cr.message}"
            )
        al = m.get("accept_length_mean")
        tps = m.get("tokens_per_s")
        return (
            head + f"\n  accept length {al if al is None else round(al, 3)}, "
            f"tokens/s {tps if tps is None else round(tps, 1)}, "
            f"sha256 {str(self.record.outputs_sha256)[:16]}"
        )
