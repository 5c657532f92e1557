"""Per-run metrics: latency samples named for what they time, and EAGLE acceptance statistics
(docs/design.md §4).

Timing covers generation only (first prefill to last token); everything before it (model load,
rank start, warm-up, the Triton interpreter's first launches) is ``setup_s``. Samples of DP ranks
without requests (IDLE batches) are kept apart from those of ranks holding requests.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

ACCEPT_RATE_DENOMINATOR = "draft tokens proposed: (num_draft_tokens - 1) per request per verify step"
LOOP_DEFINITION = "output ends in >= 3 exact repeats of a period of 1..32 tokens covering >= 24 tokens"
SAMPLE_KINDS = (
    "latency_s",
    "latency_s_idle",
    "forward_s",
    "forward_s_idle",
    "metadata_s",
    "attention_s",
    "collective_s",
)
SAMPLE_DEFINITIONS = {
    "latency_s": "one phase of one scheduling round (prefill; draft = steps draft forwards; verify; draft-extend; "
    "decode), on a rank holding requests",
    "latency_s_idle": "the same phases on a DP rank without requests (IDLE batches)",
    "forward_s": "one forward pass, keyed model/FORWARD_MODE (metadata + layers + DP collectives)",
    "forward_s_idle": "one IDLE forward pass of a rank without requests",
    "metadata_s": "one init_forward_metadata call, keyed model/FORWARD_MODE (a multi-step draft's DECODE step: "
    "the step's whole metadata, spec_info.kv_indptr / kv_indices included)",
    "attention_s": "attention (KV write + kernel) summed over the layers of one forward, keyed model/FORWARD_MODE",
    "collective_s": "DP collectives per forward (token-count all_gather, MLP all_gather + all_reduce with their "
    "shard compute), and any_rank all_reduce per scheduling decision",
}
TIMING_DEFINITION = (
    "tokens_per_s = tokens_generated / generation_s; generation_s spans the first prefill to the "
    "last token (DP: earliest rank start to latest rank end); setup_s is everything before it"
)


def loop_period(tokens: list[int], max_period: int = 32, repeats: int = 3, min_span: int = 24) -> int | None:
    """The period of an exact repetition the sequence ends in, or None (see LOOP_DEFINITION)."""
    for p in range(1, max_period + 1):
        span = max(repeats * p, min_span)
        if len(tokens) < span:
            break
        tail = tokens[-span:]
        if all(tail[i] == tail[i - p] for i in range(p, span)):
            return p
    return None


def loop_summary(outputs: list[list[int] | None]) -> dict:
    """Share of outputs that end in a repetition loop: acceptance earned on loops flatters a draft."""
    looping = [i for i, o in enumerate(outputs) if o and loop_period(o) is not None]
    n = sum(1 for o in outputs if o)
    return {"share": len(looping) / n if n else None, "prompts": looping, "definition": LOOP_DEFINITION}


def _samples() -> dict[str, list[float]]:
    return defaultdict(list)


@dataclass
class Metrics:
    samples: dict[str, dict[str, list[float]]] = field(default_factory=lambda: {k: _samples() for k in SAMPLE_KINDS})
    accept_length_per_step: list[int] = field(
        default_factory=list
    )  # accepted drafts + 1 (bonus), per request per verify
    proposed_per_step: int = 0  # draft tokens proposed per request per verify step
    max_depth: int = 0  # steps: the deepest a path can go
    muted: bool = False  # warm-up: nothing is recorded

    @property
    def latency_s(self) -> dict[str, list[float]]:
        return self.samples["latency_s"]

    def add_latency(self, phase: str, seconds: float, idle: bool = False) -> None:
        """``idle``: a phase of a DP rank without requests (its IDLE forwards), kept apart."""
        if self.muted:
            return
        self.samples["latency_s_idle" if idle else "latency_s"][phase].append(seconds)

    def add_sample(self, kind: str, key: str, seconds: float) -> None:
        if not self.muted:
            self.samples[kind][key].append(seconds)

    def add_accepts(self, accepted_drafts: list[int]) -> None:
        if not self.muted:
            self.accept_length_per_step.extend(a + 1 for a in accepted_drafts)

    def merge_samples(self, samples: dict[str, dict[str, list[float]]], skip: tuple = ()) -> None:
        """Add another rank's samples (``skip``: kinds already streamed)."""
        for kind, by_key in samples.items():
            if kind in skip or kind not in self.samples:
                continue
            for key, values in by_key.items():
                self.samples[kind][key].extend(values)

    def export_samples(self) -> dict[str, dict[str, list[float]]]:
        return {kind: {k: list(v) for k, v in by_key.items()} for kind, by_key in self.samples.items()}

    def summary(
        self, tokens_generated: int, wall_s: float, generation_s: float | None = None, setup_s: float | None = None
    ) -> dict:
        """The ``metrics`` block of a run record. ``wall_s``: the whole run; ``generation_s`` (default
        ``wall_s``): first prefill to last token, the denominator of tokens_per_s."""
        gen = wall_s if generation_s is None else generation_s
        steps = self.accept_length_per_step
        n = len(steps)
        accepted = sum(a - 1 for a in steps)
        per_pos = [(sum(1 for a in steps if a - 1 >= d) / n) if n else None for d in range(1, self.max_depth + 1)]
        return {
            "accept_length_mean": (sum(steps) / n) if n else None,
            "accept_length_per_step": steps,
            "verify_steps": n,
            "acceptance_rate": (accepted / (n * self.proposed_per_step)) if n and self.proposed_per_step else None,
            "acceptance_rate_denominator": ACCEPT_RATE_DENOMINATOR,
            "acceptance_per_position": per_pos,
            **self.export_samples(),
            "sample_definitions": SAMPLE_DEFINITIONS,
            "tokens_generated": tokens_generated,
            "wall_s": wall_s,
            "generation_s": gen,
            "setup_s": setup_s,
            "tokens_per_s": tokens_generated / gen if gen and gen > 0 else None,
            "timing_definition": TIMING_DEFINITION,
        }
