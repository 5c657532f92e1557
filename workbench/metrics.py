"""Per-run metrics: latency samples per phase and EAGLE acceptance statistics (DESIGN §7)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List

ACCEPT_RATE_DENOMINATOR = "draft tokens proposed: (num_draft_tokens - 1) per request per verify step"


@dataclass
class Metrics:
    latency_s: Dict[str, List[float]] = field(default_factory=lambda: defaultdict(list))
    accept_length_per_step: List[int] = field(default_factory=list)  # accepted drafts + 1 (bonus), per request per verify
    proposed_per_step: int = 0  # draft tokens proposed per request per verify step
    max_depth: int = 0  # steps: the deepest a path can go

    def add_latency(self, phase: str, seconds: float) -> None:
        self.latency_s[phase].append(seconds)

    def add_accepts(self, accepted_drafts: List[int]) -> None:
        self.accept_length_per_step.extend(a + 1 for a in accepted_drafts)

    def summary(self, tokens_generated: int, wall_s: float) -> dict:
        """The ``metrics`` block of a run record."""
        steps = self.accept_length_per_step
        n = len(steps)
        accepted = sum(a - 1 for a in steps)
        per_pos = [
            (sum(1 for a in steps if a - 1 >= d) / n) if n else None for d in range(1, self.max_depth + 1)
        ]
        return {
            "accept_length_mean": (sum(steps) / n) if n else None,
            "accept_length_per_step": steps,
            "verify_steps": n,
            "acceptance_rate": (accepted / (n * self.proposed_per_step)) if n and self.proposed_per_step else None,
            "acceptance_rate_denominator": ACCEPT_RATE_DENOMINATOR,
            "acceptance_per_position": per_pos,
            "latency_s": {k: list(v) for k, v in self.latency_s.items()},
            "tokens_generated": tokens_generated,
            "wall_s": wall_s,
            "tokens_per_s": tokens_generated / wall_s if wall_s > 0 else None,
        }
