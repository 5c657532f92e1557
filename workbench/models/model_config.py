"""Model hyper-parameters (stored next to every checkpoint as JSON)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-style decoder (the target) or of an EAGLE3 head (one layer)."""

    vocab_size: int = 257
    hidden_size: int = 256
    num_layers: int = 8
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    max_position: int = 1024
    # target only: decoder layers whose outputs EAGLE3 fuses (low, mid, high); see eagle3_aux_layers
    aux_layers: tuple[int, ...] = (1, 3, 4)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, path: Path) -> ModelConfig:
        data = json.loads(Path(path).read_text())
        data["aux_layers"] = tuple(data.get("aux_layers", ()))
        return cls(**data)


def eagle3_aux_layers(num_layers: int) -> tuple[int, ...]:
    """The target layers whose outputs an EAGLE3 head fuses, as SGLang's default
    ``set_eagle3_layers_to_capture``: the inputs of layers [2, n // 2, n - 3], i.e. the outputs of
    layers (1, n // 2 - 1, n - 4)."""
    if num_layers < 5:
        raise ValueError(f"EAGLE3 taps three distinct layers out of at least 5; got num_layers={num_layers}")
    return (1, num_layers // 2 - 1, num_layers - 4)
