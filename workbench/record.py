"""The run record (DESIGN §7): one JSON-serialisable dict per run, and ``RunResult`` around it."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import torch

from workbench.config import RunConfig
from workbench.metrics import Metrics, loop_summary


def outputs_sha256(outputs: List[Optional[List[int]]]) -> str:
    """sha256 over the generated token ids of all prompts, in prompt order."""
    return hashlib.sha256(json.dumps(outputs, separators=(",", ":")).encode()).hexdigest()


def environment(backend_kernel: Optional[str]) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
           "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "kernel": backend_kernel}
    try:
        env["triton"] = importlib.metadata.version("triton")  # metadata only: importing triton here would
    except importlib.metadata.PackageNotFoundError:  # pre-empt kernels' interpreter selection
        env["triton"] = None
    # whether this run's Triton kernels ran in the interpreter (only the triton backend runs them)
    env["triton_interpret"] = bool(backend_kernel) and "interpreter" in backend_kernel
    return env


def build_record(
    cfg: RunConfig, prompts: List[str], outputs: Dict[int, List[int]], metrics: Metrics, wall_s: float,
    crash: Optional[dict], kernel: Optional[str], kernel_stand_in: Optional[bool], status: Optional[str] = None,
    extra: Optional[dict] = None,
) -> dict:
    ordered = [outputs.get(i) for i in range(len(prompts))]
    tokens = sum(len(o) for o in ordered if o)
    config = cfg.to_dict()
    config.update(prompts=prompts, kernel=kernel, kernel_stand_in=kernel_stand_in)
    rec = {
        "status": status or ("ok" if not crash else "error" if crash.get("phase") == "setup" else "crashed"),
        "config": config,
        "crash": crash,
        "metrics": {**metrics.summary(tokens, wall_s), "repetition_loops": loop_summary(ordered)},
        "outputs": ordered,
        "outputs_sha256": outputs_sha256(ordered) if not crash else None,
        "env": environment(kernel),
    }
    rec.update(extra or {})
    return rec


@dataclass
class RunResult:
    """A run record with conveniences for notebooks."""

    record: dict

    @property
    def status(self) -> str:
        return self.record["status"]

    @property
    def crash(self) -> Optional[dict]:
        return self.record.get("crash")

    @property
    def metrics(self) -> dict:
        return self.record.get("metrics") or {}

    def __repr__(self) -> str:
        return f"RunResult: {self.summary()}"

    def _repr_html_(self) -> str:
        from workbench.display import run_html

        return run_html(self.record)

    def replay_crash(self, fix: bool = False, rank: Optional[int] = None):
        """Replay this run's crash bundle in-process (``workbench.debug.replay.replay_crash``); ``rank``
        picks another failed rank's bundle. Raises the recorded exception, or returns a ReplayResult."""
        from workbench.debug.replay import replay_crash

        crashes = [self.crash] + list((self.record.get("dp") or {}).get("rank_failures") or [])
        chosen = next((c for c in crashes if c and (rank is None or c.get("rank") == rank) and c.get("bundle")), None)
        if chosen is None:
            have = sorted({c.get("rank") for c in crashes if c and c.get("bundle")})
            raise ValueError(f"no crash bundle for rank {rank} in this run (ranks with bundles: {have})")
        return replay_crash(chosen["bundle"], fix=fix)

    def save(self, path: str) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.record, indent=1))
        return p

    def summary(self) -> str:
        c, m = self.record["config"], self.metrics
        head = f"[{self.status}] backend={c['backend']} ({c.get('kernel')}) revision={c['revision']} dp={c['dp']} " \
               f"steps={c['steps']} topk={c['topk']} draft_tokens={c['draft_tokens']}"
        if self.crash:
            cr = self.crash
            return head + f"\n  rank {cr['rank']} phase {cr['phase']} mode {cr['forward_mode']} bs {cr['batch_size']}: " \
                          f"{cr['exception_type']}: {cr['message']}"
        al = m.get("accept_length_mean")
        tps = m.get("tokens_per_s")
        return head + f"\n  accept length {al if al is None else round(al, 3)}, tokens/s {tps if tps is None else round(tps, 1)}, " \
                      f"sha256 {str(self.record.get('outputs_sha256'))[:16]}"
