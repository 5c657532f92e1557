"""``reproduce(config) -> RunResult``: the one entry point notebooks, the CLI and CI call."""

from __future__ import annotations

import contextlib
import dataclasses

import workbench_kernels
from workbench.models.loader import load_models, load_prompts
from workbench.run.config import RunConfig, check_kernels, make_config
from workbench.run.dp.launch import run_dp
from workbench.run.events import OnEvent
from workbench.run.rank_run import run_rank
from workbench.run.record import RunResult, build_record
from workbench.speculative.eagle_draft_extend_pr28221 import fix_applied, is_fix_applied


def reproduce(config: RunConfig | dict | None = None, on_event: OnEvent | None = None, **overrides) -> RunResult:
    """Run the EAGLE3 loop (or plain greedy) with the given backend, revision, DP and spec
    settings; return the run record. A crash is data in the record; bad parameters and bad
    checkpoints raise (ConfigError, CheckpointError) before anything runs.

    The fix of PR #28221 applied in place (``apply_fix_in_place``, or the class patched in this
    process when the run starts, e.g. inside ``with workbench.fix_applied():``) holds for the run:
    every rank applies it from the run's config, and it is undone afterwards unless it was in place
    before. ``on_event(kind, rank, payload)`` receives the run's events (``workbench.run.events``)."""
    cfg = make_config(config, **overrides)
    workbench_kernels.setup(cfg.device)  # for a process without an entry point of its own (a notebook); else a no-op
    check_kernels(cfg)
    if is_fix_applied():  # the one read of the class: the patch in place when the run starts is the run's state
        cfg = dataclasses.replace(cfg, apply_fix_in_place=True)
    prompts = cfg.prompts if cfg.prompts is not None else load_prompts()
    load_models(cfg.model_dir)  # a missing or corrupt checkpoint fails here, before any rank process starts
    if cfg.dp > 1 or cfg.fault is not None:
        return RunResult(run_dp(cfg, prompts, on_event=on_event))
    with fix_applied() if cfg.apply_fix_in_place else contextlib.nullcontext():
        res = run_rank(cfg, prompts, list(range(len(prompts))))
    if on_event is not None:
        on_event("done", 0, res)
    leaked = res.slots_capacity - res.slots_free if res.slots_free is not None else None
    return RunResult(
        build_record(
            cfg,
            prompts,
            res.outputs,
            res.metrics,
            res.wall_s,
            res.crash,
            res.kernel,
            res.kernel_stand_in,
            slots_leaked=leaked,
            timing=res,
        )
    )
