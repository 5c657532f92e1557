"""DP attention: one process per rank joined by torch.distributed (gloo on CPU)."""

LOG_DIR_ENV = "WB_LOG_DIR"  # where rank logs are kept after a run (see workbench.run.dp.launch); unset: not kept
