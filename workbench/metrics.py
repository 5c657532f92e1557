"""Per-run metrics: latency samples per phase and EAGLE acceptance statistics (docs/design.md §4)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, Optional

ACCEPT_RATE_DENOMINATOR = "draft tokens proposed: (num_draft_tokens - 1) per request per verify step"
LOOP_DEFINITION = "output ends in >= 3 exact repeats of a period of 1..32 tokens covering >= 24 tokens"


def loop_period(tokens: List[int], max_period: int = 32, repeats: int = 3, min_span: int = 24) -> Optional[int]:
    """The period of an exact repetition the sequence ends in, or None (see LOOP_DEFINITION)."""
    for p in range(1, max_period + 1):
        span = max(repeats * p, min_span)
        if len(tokens) < span:
            break
        tail = tokens[-span:]
        if all(tail[i] == tail[i - p] for i in range(p, span)):
            return p
    return None


def loop_summary(outputs: List[Optional[List[int]]]) -> dict:
    """Share of outputs that end in a repetition loop: acceptance earned on loops flatters a draft."""
    looping = [i for i, o in enumerate(outputs) if o and loop_period(o) is not None]
    n = sum(1 for o in outputs if o)
    return {"share": len(looping) / n if n else None, "prompts": looping, "definition": LOOP_DEFINITION}


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
