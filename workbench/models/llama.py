"""Llama-style target model (RMSNorm, RoPE, GQA, SwiGLU) that also returns EAGLE3 aux hidden states."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from workbench.models.layers import Attention, RMSNorm, SwiGLU, run_mlp
from workbench.models.model_config import ModelConfig

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.self_attn = Attention(cfg.hidden_size, cfg, layer_id)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, forward_batch: ForwardBatch | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions, forward_batch)
        return x + run_mlp(self.mlp, self.post_attention_layernorm(x), forward_batch)


class LlamaForCausalLM(nn.Module):
    """The target. ``forward`` returns the final hidden states and the concatenated aux states."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        forward_batch: ForwardBatch | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids, positions: (T,) (engine) or (B, L) (training).

        Returns (hidden (..., H) after the final norm, aux (..., 3H)): the outputs of
        ``config.aux_layers`` concatenated low|mid|high, which the EAGLE3 head fuses.
        """
        x = self.embed_tokens(input_ids)
        aux = []
        for i, layer in enumerate(self.layers):
            x = layer(x, positions, forward_batch)
            if i in self.config.aux_layers:
                aux.append(x)
        return self.norm(x), torch.cat(aux, dim=-1)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., H) after the final norm -> logits (..., V)."""
        return self.lm_head(hidden)
