"""``RunConfig``: every parameter of a run, validated before any process starts."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import List, Optional

from workbench.backends import backend_names
from workbench.revisions import REVISIONS

DP_POLICIES = ("balanced", "pack")
DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "cuda")


class ConfigError(ValueError):
    """A bad run parameter; the message names the value and the valid choices."""


@dataclass
class RunConfig:
    backend: str = "triton"
    revision: str = "pr-28221"
    dp: int = 1
    steps: int = 5
    topk: int = 4
    draft_tokens: int = 16
    prompts: Optional[List[str]] = None  # None: the shipped prompt set
    max_new_tokens: int = 64
    max_running: int = 20
    seed: int = 0
    mode: str = "eagle"  # "eagle" or "greedy" (the target alone)
    dp_policy: str = "balanced"
    apply_fix_in_place: bool = False  # patch the regressed class in every rank before running
    timeout_s: float = 600.0
    fault: Optional[str] = None  # test hook: "raise@rank1" or "sigkill@rank1"
    model_dir: Optional[str] = None
    dtype: str = "float32"  # weights, activations and KV cache; "bfloat16" casts both models after loading
    device: str = "cpu"  # where the engine's tensors live; only "cpu" is wired through the engine so far
    warmup: bool = True  # one short request before timing (dp 1), counted in setup_s
    extra: dict = field(default_factory=dict)

    def validate(self) -> "RunConfig":
        def bad(name, value, valid):
            raise ConfigError(f"invalid {name} {value!r}; valid: {valid}")

        if self.backend not in backend_names():
            bad("backend", self.backend, ", ".join(backend_names()))
        if self.revision not in REVISIONS:
            bad("revision", self.revision, ", ".join(REVISIONS))
        if self.mode not in ("eagle", "greedy"):
            bad("mode", self.mode, "eagle, greedy")
        if self.dp_policy not in DP_POLICIES:
            bad("dp_policy", self.dp_policy, ", ".join(DP_POLICIES))
        if self.dtype not in DTYPES:
            bad("dtype", self.dtype, ", ".join(DTYPES))
        if self.dtype != "float32" and self.dp > 1:
            bad("dtype", self.dtype, f"float32 at dp {self.dp} (idle ranks' inputs are float32 in the engine; "
                                     "bfloat16 runs at dp 1)")
        if self.device not in DEVICES:
            bad("device", self.device, ", ".join(DEVICES))
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                bad("device", self.device, "cpu (no CUDA device is visible on this machine)")
            bad("device", self.device, "cpu (the engine does not place its tensors on cuda yet)")
        for name in ("dp", "steps", "topk", "max_new_tokens", "max_running"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(name, getattr(self, name), "an integer >= 1")
        limit = self.steps * self.topk + 1
        if not isinstance(self.draft_tokens, int) or not 2 <= self.draft_tokens <= limit:
            bad("draft_tokens", self.draft_tokens, f"an integer in 2..steps*topk+1 = {limit} (steps {self.steps}, topk {self.topk})")
        if self.prompts is not None:
            if not isinstance(self.prompts, list) or not self.prompts:
                bad("prompts", self.prompts, "a non-empty list of non-empty strings, or None for the shipped set")
            for i, p in enumerate(self.prompts):
                if not isinstance(p, str) or not p:
                    bad(f"prompts[{i}]", p, "a non-empty string")
        if self.timeout_s <= 0:
            bad("timeout_s", self.timeout_s, "a positive number of seconds")
        if self.fault is not None:
            kind, _, rank = self.fault.partition("@rank")
            if kind not in ("raise", "sigkill") or not rank.isdigit() or int(rank) >= self.dp:
                bad("fault", self.fault, f"raise@rankN or sigkill@rankN with N < dp ({self.dp})")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
