"""How requests are assigned to DP ranks."""

from __future__ import annotations

POLICIES = ("balanced", "pack")


def assign(num_prompts: int, dp: int, policy: str, max_running: int) -> list[list[int]]:
    """Prompt indices per rank. ``balanced``: round robin. ``pack``: fill rank 0 up to
    ``max_running`` before the next rank, so with few requests the later ranks stay idle."""
    if policy == "balanced":
        return [list(range(r, num_prompts, dp)) for r in range(dp)]
    if policy == "pack":
        return [
            list(range(r * max_running, min(num_prompts, (r + 1) * max_running)))
            if r < dp - 1
            else list(range(r * max_running, num_prompts))
            for r in range(dp)
        ]
    raise ValueError(f"unknown DP policy {policy!r}; valid: {', '.join(POLICIES)}")
