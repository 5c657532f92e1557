"""Merging what DP ranks report (event lines ``[kind, rank, payload]``) into one run record."""
from __future__ import annotations

import signal
from pathlib import Path
from typing import Dict, List, Optional

from workbench.config import RunConfig
from workbench.metrics import Metrics
from workbench.record import build_record, crash_record


def primary_crash(crashes: List[dict]) -> Optional[dict]:
    """The root cause among the ranks' failures: a rank killed by a signal explains its peers'
    broken collectives; otherwise the earliest exception raised (peers fail after it)."""
    died = [c for c in crashes if c["exception_type"] == "RankProcessDied"]
    reported = sorted((c for c in crashes if c.get("time") is not None), key=lambda c: c["time"])
    return (died or reported or crashes or [None])[0]


def signal_crash(rank: int, exitcode: Optional[int], last: Optional[dict], log: Optional[Path]) -> dict:
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
    return crash_record(rank=rank, phase=last.get("phase"), forward_mode=last.get("forward_mode"),
                        batch_size=last.get("batch_size"), exception_type=kind, message=f"rank {rank} {how}",
                        traceback=tail or None)


class Collector:
    """Accumulates rank events; ``record()`` builds the merged run record."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.metrics = Metrics(proposed_per_step=cfg.draft_tokens - 1, max_depth=cfg.steps)
        self.results: Dict[int, dict] = {}
        self.last_forward: Dict[int, dict] = {}
        self.crashes: List[dict] = []

    def feed(self, kind: str, rank: int, payload) -> bool:
        """Returns True when the event is a failure."""
        if kind == "forward":
            self.last_forward[rank] = payload
        elif kind == "latency":
            self.metrics.add_latency(*payload)
        elif kind == "accepts":
            self.metrics.add_accepts(payload)
        elif kind == "done":
            self.results[rank] = payload
            if payload.get("crash"):
                self.crashes.append(payload["crash"])
                return True
        return False

    def rank_died(self, rank: int, exitcode: Optional[int], log: Optional[Path]) -> None:
        self.results[rank] = {"outputs": {}}
        self.crashes.append(signal_crash(rank, exitcode, self.last_forward.get(rank), log))

    def record(self, prompts: List[str], wall_s: float, status: Optional[str], dp_info: dict) -> dict:
        outputs: Dict[int, List[int]] = {}
        for res in self.results.values():
            outputs.update({int(k): v for k, v in res.get("outputs", {}).items()})
        first = next((r for r in self.results.values() if r.get("kernel")), {})
        complete = len(self.results) == self.cfg.dp and not self.crashes
        extra = {
            "dp": {**dp_info, "ranks_reported": sorted(self.results), "rank_failures": self.crashes,
                   "last_forward": {str(k): v for k, v in self.last_forward.items()}},
            "slots_leaked": sum(r["slots_capacity"] - r["slots_free"] for r in self.results.values()) if complete else None,
        }
        crash = primary_crash(self.crashes)
        if status == "timeout":
            crash = crash_record(rank=None, phase=None, forward_mode=None, batch_size=None, exception_type="Timeout",
                                 message=f"run exceeded {self.cfg.timeout_s} s; last forward per rank: {self.last_forward}")
        return build_record(self.cfg, prompts, outputs, self.metrics, wall_s, crash, first.get("kernel"),
                            first.get("kernel_stand_in"), status=status, extra=extra)
