"""``RunConfig``: every parameter of a run, validated before any process starts, and the one
source of the command-line run flags (each field's metadata: flag, SGLang-style aliases, help,
choices), so the CLI, torchrun's entry and the notebooks cannot drift apart."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.backends import backend_names
from workbench.run.dp.policy import POLICIES as DP_POLICIES

MODES = ("eagle", "greedy")
DTYPES = ("float32", "bfloat16")
DEVICES = ("cpu", "cuda")
# The names of two registries whose modules import torch, written here so that this module (the command
# line's flags) loads without it; tests/run/test_config.py checks them against the registries' keys.
REVISION_NAMES = ("pre-24860", "pr-24860", "pr-28221")  # workbench.speculative.revisions.REVISIONS
VERIFY_IDLE_INPUTS = ("eagle-verify", "eagle-verify-fixed")  # workbench.speculative.verify_idle
IDLE_VERIFY_RUNS = ("graph", "eager")  # workbench.speculative.verify_idle


class ConfigError(ValueError):
    """A bad run parameter; the message names the value and the valid choices."""


def _arg(
    help: str,
    *,
    aliases: Sequence[str] = (),
    flag: str | None = None,
    choices: Callable[[], Sequence[str]] | None = None,
    cli: bool = True,
) -> dict[str, Any]:
    """Field metadata: the CLI flag (default ``--field-name``), aliases, help and valid choices."""
    return {"help": help, "aliases": tuple(aliases), "flag": flag, "choices": choices, "cli": cli}


@dataclass
class RunConfig:
    backend: str = field(
        default="triton",
        metadata=_arg(
            "attention backend (triton: its Triton kernels run in Triton's interpreter on a CPU)",
            aliases=("--attention-backend",),
            choices=backend_names,
        ),
    )
    revision: str = field(
        default="pr-28221", metadata=_arg("code state of the draft-extend spec_info", choices=lambda: REVISION_NAMES)
    )
    dp: int = field(default=1, metadata=_arg("DP attention ranks (processes)", aliases=("--dp-size",)))
    steps: int = field(default=5, metadata=_arg("EAGLE draft steps per round", aliases=("--speculative-num-steps",)))
    topk: int = field(default=4, metadata=_arg("branches kept per draft step", aliases=("--speculative-eagle-topk",)))
    draft_tokens: int = field(
        default=16,
        metadata=_arg(
            "tree tokens the target verifies per request, root included (2..steps*topk+1)",
            aliases=("--speculative-num-draft-tokens",),
        ),
    )
    prompts: list[str] | None = field(default=None, metadata=_arg("prompt strings (default: the shipped set)"))
    max_new_tokens: int = field(default=64, metadata=_arg("tokens to generate per prompt"))
    max_running: int = field(
        default=20, metadata=_arg("requests per batch on one rank", aliases=("--max-running-requests",))
    )
    seed: int = field(default=0, metadata=_arg("torch seed"))
    mode: str = field(default="eagle", metadata=_arg("eagle, or greedy (the target alone)", choices=lambda: MODES))
    dp_policy: str = field(
        default="balanced",
        metadata=_arg(
            "how prompts go to DP ranks (pack: fill rank 0 first, leaving later ranks idle)",
            choices=lambda: DP_POLICIES,
        ),
    )
    verify_idle_input: str = field(
        default="eagle-verify",
        metadata=_arg(
            "spec_info of an idle rank's verify pass: upstream's EagleVerifyInput idle input, or "
            "eagle-verify-fixed (kv_indptr = None, the proposed fix)",
            choices=lambda: VERIFY_IDLE_INPUTS,
        ),
    )
    idle_verify: str = field(
        default="graph",
        metadata=_arg(
            "an idle rank's verify batch: replayed from a CUDA graph (metadata from seq_lens) or run eager "
            "(init_forward_metadata reads its spec_info)",
            choices=lambda: IDLE_VERIFY_RUNS,
        ),
    )
    apply_fix_in_place: bool = field(
        default=False, metadata=_arg("patch the regressed class in every rank before running (PR #28221 in place)")
    )
    timeout_s: float = field(
        default=600.0, metadata=_arg("whole-run limit in seconds", flag="--timeout", aliases=("--timeout-s",))
    )
    fault: str | None = field(default=None, metadata=_arg("test hook: raise@rankN or sigkill@rankN", cli=False))
    model_dir: str | None = field(default=None, metadata=_arg("checkpoint directory (default: the shipped models)"))
    dtype: str = field(
        default="float32",
        metadata=_arg(
            "weights, activations and KV cache (bfloat16: both models cast after loading; dp 1 only)",
            choices=lambda: DTYPES,
        ),
    )
    device: str = field(
        default="cpu",
        metadata=_arg(
            "where the engine's tensors live (cuda: dp 1, a visible GPU; the Triton kernels compile there)",
            choices=lambda: DEVICES,
        ),
    )
    threads: int | None = field(
        default=None,
        metadata=_arg(
            "torch math threads per rank (default: this process's setting at dp 1, "
            "the cores divided among the ranks under DP)"
        ),
    )
    warmup: bool = field(
        default=True,
        metadata=_arg("one untimed prefill + decode round on every rank before generation (in setup_s)", cli=False),
    )
    extra: dict = field(default_factory=dict, metadata=_arg("free-form notes kept in the record", cli=False))

    def validate(self) -> RunConfig:
        def bad(name, value, valid):
            raise ConfigError(f"invalid {name} {value!r}; valid: {valid}")

        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            if choices is not None and getattr(self, f.name) not in choices():
                bad(f.name, getattr(self, f.name), ", ".join(choices()))
        if self.dtype != "float32" and self.dp > 1:
            bad(
                "dtype",
                self.dtype,
                f"float32 at dp {self.dp} (idle ranks' inputs are float32 in the engine; bfloat16 runs at dp 1)",
            )
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                bad("device", self.device, "cpu (no CUDA device is visible on this machine)")
            if self.dp > 1:
                bad(
                    "device",
                    self.device,
                    f"cpu at dp {self.dp} (DP ranks exchange CPU tensors over gloo; cuda runs at dp 1)",
                )
        for name in ("dp", "steps", "topk", "max_new_tokens", "max_running"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(name, getattr(self, name), "an integer >= 1")
        limit = self.steps * self.topk + 1
        if not isinstance(self.draft_tokens, int) or not 2 <= self.draft_tokens <= limit:
            bad(
                "draft_tokens",
                self.draft_tokens,
                f"an integer in 2..steps*topk+1 = {limit} (steps {self.steps}, topk {self.topk})",
            )
        if self.prompts is not None:
            if not isinstance(self.prompts, list) or not self.prompts:
                bad("prompts", self.prompts, "a non-empty list of non-empty strings, or None for the shipped set")
            for i, p in enumerate(self.prompts):
                if not isinstance(p, str) or not p:
                    bad(f"prompts[{i}]", p, "a non-empty string")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            bad("threads", self.threads, "an integer >= 1, or None for the default")
        if self.timeout_s <= 0:
            bad("timeout_s", self.timeout_s, "a positive number of seconds")
        if self.fault is not None:
            kind, _, rank = self.fault.partition("@rank")
            if kind not in ("raise", "sigkill") or not rank.isdigit() or int(rank) >= self.dp:
                bad("fault", self.fault, f"raise@rankN or sigkill@rankN with N < dp ({self.dp})")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def check_kernels(cfg: RunConfig) -> None:
    """After ``workbench_kernels.setup``: the triton backend's kernels must run where the tensors are.
    Compiled Triton (set up for cuda earlier in this process) refuses CPU tensors."""
    import workbench_kernels  # torch: this module gives the command line its flags without it

    if cfg.backend == "triton" and cfg.device == "cpu" and not workbench_kernels.interpreted():
        raise ConfigError(
            "invalid device 'cpu' for backend triton in this process: its Triton kernels were set up compiled "
            "for cuda; valid: cuda here, or cpu in a fresh process (workbench_kernels.setup('cpu') picks the "
            "interpreter)"
        )


def make_config(config: RunConfig | dict | None = None, **overrides: Any) -> RunConfig:
    """A validated RunConfig from a RunConfig, a dict and/or keyword overrides."""
    if isinstance(config, RunConfig):
        cfg = dataclasses.replace(config, **overrides)
    else:
        fields = {f.name for f in dataclasses.fields(RunConfig)}
        merged = {**(config or {}), **overrides}
        unknown = sorted(set(merged) - fields)
        if unknown:
            raise ConfigError(f"unknown run parameter(s) {unknown}; valid: {sorted(fields)}")
        cfg = RunConfig(**merged)
    return cfg.validate()


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_run_args(
    parser: argparse.ArgumentParser, exclude: Sequence[str] = (), defaults: Mapping[str, object] | None = None
) -> None:
    """One flag per RunConfig field (with its aliases and choices), plus ``--prompts-file`` and
    ``--num-prompts``. Defaults are None so that ``config_from_args`` passes only what was given; the help
    shows RunConfig's default, or ``defaults[field]`` for a command that fills the field otherwise."""
    for f in dataclasses.fields(RunConfig):
        meta = f.metadata
        if not meta.get("cli") or f.name in exclude:
            continue
        default = (defaults or {}).get(f.name, f.default)
        shown = "" if default is None else f" (default: {default})"
        kw: dict[str, Any] = {"dest": f.name, "default": None, "help": meta["help"] + shown}
        if f.type in ("bool", bool):
            kw["action"] = "store_const"
            kw["const"] = True
        elif f.name == "prompts":
            kw["nargs"] = "+"
        else:
            kw["type"] = {"int": int, "int | None": int, "float": float}.get(f.type, str)
        if meta.get("choices") is not None:
            kw["choices"] = list(meta["choices"]())
        parser.add_argument(_flag(f), *meta["aliases"], **kw)
    parser.add_argument("--prompts-file", type=Path, default=None, help="JSON list of prompt strings")
    parser.add_argument("--num-prompts", type=int, default=None, help="use the first N prompts")


def config_from_args(args: argparse.Namespace, **overrides: Any) -> dict:
    """The run parameters given on the command line (``add_run_args``), as a dict for ``make_config``."""
    given = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if getattr(args, f.name, None) is not None
    }
    if getattr(args, "prompts_file", None) is not None:
        given["prompts"] = json.loads(args.prompts_file.read_text())
    if getattr(args, "num_prompts", None) is not None:
        from workbench.models.loader import load_prompts  # torch, only when prompts are chosen

        given["prompts"] = (given.get("prompts") or load_prompts())[: args.num_prompts]
    return {**given, **overrides}
