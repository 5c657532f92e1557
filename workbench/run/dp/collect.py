"""Merging what DP ranks report (event lines ``[kind, rank, payload]``) into one run record."""

from __future__ import annotations

import signal
from pathlib import Path

from workbench.engine.metrics import Metrics
from workbench.run.config import RunConfig
from workbench.run.record import Crash, DPInfo, RankReport, RunRecord, build_record


def primary_crash(crashes: list[Crash]) -> Crash | None:
    """The root cause among the ranks' failures: a rank killed by a signal explains its peers'
    broken collectives; otherwise the earliest exception raised (peers fail after it)."""
    died = [c for c in crashes if c.exception_type == "RankProcessDied"]
    reported = sorted((c for c in crashes if c.time is not None), key=lambda c: c.time)
    return (died or reported or crashes or [None])[0]


def signal_crash(rank: int, exitcode: int | None, last: dict | None, log: Path | None) -> Crash:
    """The crash entry of a rank that ended without reporting: a signal or an exit code, or
    (``exitcode`` None) an end nobody saw, e.g. torchrun stopping it after another rank failed."""
    if exitcode is None:
        kind, how = "RankNoResult", "left no result (stopped by its launcher, or killed)"
    else:
        kind = "RankProcessDied"
        how = f"killed by signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exited with code {exitcode}"
        how += " without reporting a result"
    last = last or {}
    tail = log.read_text()[-4000:] if log is not None and log.exists() else ""
    return Crash(
        rank=rank,
        phase=last.get("phase"),
        forward_mode=last.get("forward_mode"),
        batch_size=last.get("batch_size"),
        exception_type=kind,
        message=f"rank {rank} {how}",
        traceback=tail or None,
    )


class Collector:
    """Accumulates rank events; ``record()`` builds the merged run record."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.metrics = Metrics(proposed_per_step=cfg.draft_tokens - 1, max_depth=cfg.steps)
        self.results: dict[int, RankReport] = {}
        self.last_forward: dict[int, dict] = {}
        self.crashes: list[Crash] = []

    def feed(self, kind: str, rank: int, payload) -> bool:
        """Returns True when the event is a failure; a ``done`` payload is a ``RankReport`` or its JSON form."""
        if kind == "forward":
            self.last_forward[rank] = payload
        elif kind == "latency":
            self.metrics.add_latency(*payload)
        elif kind == "accepts":
            self.metrics.add_accepts(payload)
        elif kind == "done":
            report = payload if isinstance(payload, RankReport) else RankReport.from_event(payload)
            self.results[rank] = report
            self.metrics.merge_samples(report.samples or {}, skip=("latency_s", "latency_s_idle"))
            if report.crash is not None:
                self.crashes.append(report.crash)
                return True
        return False

    def rank_died(self, rank: int, exitcode: int | None, log: Path | None) -> None:
        self.results[rank] = RankReport()
        self.crashes.append(signal_crash(rank, exitcode, self.last_forward.get(rank), log))

    def timing(self, started: float | None = None) -> dict:
        """Generation time from the ranks' own stamps: earliest first prefill to latest last token
        (epoch seconds); setup from ``started`` (epoch seconds, the launch) to the first prefill."""
        reports = self.results.values()
        starts = [r.gen_start for r in reports if r.gen_start is not None]
        ends = [r.gen_end for r in reports if r.gen_end is not None]
        devices = sorted({r.device for r in reports if r.device})
        threads = sorted({r.torch_threads for r in reports if r.torch_threads})
        warm = [r.warmup_s for r in reports if r.warmup_s is not None]
        out = {
            "device": ", ".join(devices) or None,
            "generation_s": None,
            "setup_s": None,
            "warmup_s": max(warm) if warm else None,  # the ranks warm up side by side
            "torch_threads": threads[0] if len(threads) == 1 else threads or None,
            "rank_setup_s": {str(k): r.setup_s for k, r in sorted(self.results.items())},
        }
        if starts and len(ends) == len(starts) == self.cfg.dp:
            out["generation_s"] = max(ends) - min(starts)
        if starts and started is not None:
            out["setup_s"] = min(starts) - started
        return out

    def record(
        self, prompts: list[str], wall_s: float, status: str | None, dp_info: dict, started: float | None = None
    ) -> RunRecord:
        """``dp_info``: assignment, init_method, logs; ``started``: epoch seconds the launch began
        (setup_s counts from it)."""
        outputs: dict[int, list[int]] = {}
        for res in self.results.values():
            outputs.update(res.outputs)
        first = next((r for r in self.results.values() if r.kernel), RankReport())
        complete = len(self.results) == self.cfg.dp and not self.crashes
        crash = primary_crash(self.crashes)
        if status == "timeout":
            crash = Crash(
                rank=None,
                phase=None,
                forward_mode=None,
                batch_size=None,
                exception_type="Timeout",
                message=f"run exceeded {self.cfg.timeout_s} s; last forward per rank: {self.last_forward}",
            )
        timing = self.timing(started)
        dp = DPInfo(
            **dp_info,
            ranks_reported=sorted(self.results),
            rank_failures=self.crashes,
            last_forward={str(k): v for k, v in self.last_forward.items()},
            rank_setup_s=timing.pop("rank_setup_s"),
        )
        leaked = sum(r.slots_capacity - r.slots_free for r in self.results.values()) if complete else None
        return build_record(
            self.cfg,
            prompts,
            outputs,
            self.metrics,
            wall_s,
            crash,
            first.kernel,
            first.kernel_stand_in,
            status=status,
            dp=dp,
            slots_leaked=leaked,
            timing=timing,
        )
