"""DP attention: one process per rank joined by torch.distributed (gloo on CPU)."""
