"""``reproduce(config) -> RunResult``: the one entry point notebooks, the CLI and CI call."""

from __future__ import annotations

import dataclasses

import kernels
from workbench.models.loader import load_models, load_prompts
from workbench.run.config import RunConfig, check_kernels, make_config
from workbench.run.record import RunResult, build_record
from workbench.speculative.eagle_draft_extend_pr28221 import apply_fix, fix_applied


def reproduce(config: RunConfig | dict | None = None, **overrides) -> RunResult:
    """Run the EAGLE3 loop (or plain greedy) with the given backend, revision, DP and spec
    settings; return the run record. A crash is data in the record; bad parameters and bad
    checkpoints raise (ConfigError, CheckpointError) before anything runs."""
    cfg = make_config(config, **overrides)
    kernels.setup(cfg.device)  # interpreter for CPU tensors, compiled for CUDA; rank processes inherit it
    check_kernels(cfg)
    if fix_applied():
        cfg = dataclasses.replace(cfg, apply_fix_in_place=True)
    prompts = cfg.prompts if cfg.prompts is not None else load_prompts()
    load_models(cfg.model_dir)  # a missing or corrupt checkpoint fails here, before any rank process starts
    if cfg.dp > 1 or cfg.fault is not None:
        from workbench.run.dp.launch import run_dp

        return RunResult(run_dp(cfg, prompts))
    from workbench.run.runner import run_rank

    if cfg.apply_fix_in_place:
        apply_fix()
    res = run_rank(cfg, prompts, list(range(len(prompts))))
    extra = {"slots_leaked": res["slots_capacity"] - res["slots_free"]} if "slots_free" in res else {}
    return RunResult(
        build_record(
            cfg,
            prompts,
            res["outputs"],
            res["metrics"],
            res["wall_s"],
            res["crash"],
            res["kernel"],
            res["kernel_stand_in"],
            extra=extra,
            timing=res,
        )
    )
