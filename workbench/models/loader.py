"""Loading the shipped checkpoints, with errors that name the file and the rebuild command."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from workbench.models.eagle3 import Eagle3Head
from workbench.models.llama import LlamaForCausalLM
from workbench.models.model_config import ModelConfig

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DEFAULT_MODEL_DIR = ASSETS / "models"
REBUILD = "python scripts/train_models.py"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable or does not match its config."""


def save_checkpoint(model: torch.nn.Module, cfg: ModelConfig, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(cfg.to_json())
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / "model.safetensors"))


def _load(cls, directory: Path, what: str):
    cfg_path, weights = directory / "config.json", directory / "model.safetensors"
    for f in (cfg_path, weights):
        if not f.is_file():
            raise CheckpointError(f"{what} checkpoint file {f} is missing; rebuild it with `{REBUILD}`")
    try:
        cfg = ModelConfig.from_json(cfg_path)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{what} config {cfg_path} is unreadable ({e}); rebuild it with `{REBUILD}`") from e
    try:
        state = load_file(str(weights))
    except Exception as e:  # safetensors raises several types for a corrupt header or body
        raise CheckpointError(f"{what} weights {weights} are corrupt ({e}); rebuild them with `{REBUILD}`") from e
    model = cls(cfg)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise CheckpointError(
            f"{what} weights {weights} do not match {cfg_path}: {str(e).splitlines()[0]} ...; rebuild with `{REBUILD}`"
        ) from e
    return inference_layout(model.eval().requires_grad_(False)), cfg


def inference_layout(model: torch.nn.Module) -> torch.nn.Module:
    """Store every ``nn.Linear`` weight (out, in) as the transpose of a contiguous (in, out) matrix.

    Values, shapes and the state dict are unchanged; ``F.linear`` then hands MKL a plain
    ``x @ W_t`` (no transposed operand), which on the 2-core AMD box runs the 2-16-row products
    of verify and multi-branch draft forwards about a quarter faster (``scripts/bench_linear_layout.py``).
    """
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.weight.data = m.weight.data.t().contiguous().t()
    return model


def load_models(directory: Path | None = None) -> tuple[LlamaForCausalLM, Eagle3Head]:
    """Load (target, draft head) from ``directory`` (default: the shipped checkpoints)."""
    directory = Path(directory) if directory is not None else DEFAULT_MODEL_DIR
    target, tcfg = _load(LlamaForCausalLM, directory / "target", "target")
    head, hcfg = _load(Eagle3Head, directory / "draft", "EAGLE3 draft")
    if hcfg.hidden_size != tcfg.hidden_size or hcfg.vocab_size != tcfg.vocab_size:
        raise CheckpointError(
            f"draft head in {directory / 'draft'} (hidden {hcfg.hidden_size}, vocab {hcfg.vocab_size}) does not fit "
            f"the target (hidden {tcfg.hidden_size}, vocab {tcfg.vocab_size}); rebuild with `{REBUILD}`"
        )
    return target, head


def models_sha256(directory: Path | str | None = None) -> str | None:
    """sha256 over both checkpoints' files (config and weights, target then draft): which models a run
    used, so that results of different models are never compared as one experiment. None when a file
    is missing (loading then fails with a CheckpointError anyway)."""
    directory = Path(directory) if directory is not None else DEFAULT_MODEL_DIR
    files = [directory / m / f for m in ("target", "draft") for f in ("config.json", "model.safetensors")]
    if not all(f.is_file() for f in files):
        return None
    return _files_sha256(tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files))


@functools.lru_cache(maxsize=8)
def _files_sha256(stamped: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 over the files' bytes; cached per (path, mtime, size), so a process hashes a checkpoint once."""
    h = hashlib.sha256()
    for path, _, _ in stamped:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def load_prompts(path: Path | None = None) -> list:
    """The shipped deterministic prompt set: a list of strings."""
    path = Path(path) if path is not None else ASSETS / "prompts.json"
    if not path.is_file():
        raise CheckpointError(f"prompt file {path} is missing; rebuild it with `{REBUILD}`")
    return json.loads(path.read_text())["prompts"]
