"""EAGLE3 draft head: fc fuses the target's low/mid/high states (3H -> H), one decoder layer
whose attention reads [norm(embed(token)) | norm(hidden)] (2H), its own norm and lm_head.

Step 0 of a draft reads the target's aux states (3H); later steps read the head's own
pre-norm output (H), which ``forward`` returns so the caller can feed it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from workbench.models.layers import Attention, RMSNorm, SwiGLU, run_mlp
from workbench.models.model_config import ModelConfig

if TYPE_CHECKING:
    from workbench.engine.forward_batch import ForwardBatch


class Eagle3Head(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        h = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, h)
        self.fc = nn.Linear(3 * h, h, bias=False)
        self.input_layernorm = RMSNorm(h, cfg.rms_eps)
        self.hidden_norm = RMSNorm(h, cfg.rms_eps)
        self.self_attn = Attention(2 * h, cfg, layer_id=0)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)
        self.norm = RMSNorm(h, cfg.rms_eps)
        self.lm_head = nn.Linear(h, cfg.vocab_size, bias=False)

    def fuse(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., 3H) target aux states -> (..., H); (..., H) own states pass through."""
        return self.fc(hidden) if hidden.shape[-1] == 3 * self.config.hidden_size else hidden

    def layer_input(self, input_ids: torch.Tensor, hidden: torch.Tensor) -> tuple:
        """Returns (attention input (..., 2H), residual (..., H))."""
        h = self.fuse(hidden)
        x = torch.cat((self.input_layernorm(self.embed_tokens(input_ids)), self.hidden_norm(h)), dim=-1)
        return x, h

    def finish(
        self, attn_out: torch.Tensor, residual: torch.Tensor, forward_batch: ForwardBatch | None
    ) -> torch.Tensor:
        x = residual + attn_out
        return x + run_mlp(self.mlp, self.post_attention_layernorm(x), forward_batch)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        forward_batch: ForwardBatch | None = None,
    ) -> torch.Tensor:
        """input_ids, positions: (T,); hidden: (T, 3H) or (T, H). Returns pre-norm states (T, H)."""
        x, residual = self.layer_input(input_ids, hidden)
        return self.finish(self.self_attn(x, positions, forward_batch), residual, forward_batch)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Pre-norm states (..., H) -> logits (..., V)."""
        return self.lm_head(self.norm(hidden))
