"""Self-distillation data for the EAGLE3 head: the target's own greedy continuations of corpus prefixes.

EAGLE-3 trains its head on the target's responses rather than on the corpus, so the head learns
what the target says, which is what speculative decoding has to predict. Here each training
sequence is a window of a training file (``prefix`` tokens, as a prompt) followed by the target's
greedy continuation (the rest of the window), generated in batches with a KV cache.

A script module (``scripts/train_models.py``); nothing the workbench runs imports it.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from workbench.models.llama import LlamaForCausalLM


@torch.no_grad()
def greedy_continue(target: LlamaForCausalLM, prefix: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """prefix (B, P) int64 -> (B, P + new_tokens): the target's greedy continuation, KV-cached.

    The same layers as ``LlamaForCausalLM.forward`` (training path), one token per step after a
    causal prefill; ``check_continuation`` compares the result with the uncached forward."""
    bsz, plen = prefix.shape
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    tokens, out = prefix, [prefix]
    for step in range(new_tokens):
        start = 0 if step == 0 else plen + step - 1
        pos = torch.arange(start, start + tokens.shape[1]).expand(bsz, -1)
        x = target.embed_tokens(tokens)
        for i, layer in enumerate(target.layers):
            attn = layer.self_attn
            q, k, v = attn.qkv(layer.input_layernorm(x), pos)
            if step == 0:
                keys.append(k)
                values.append(v)
            else:
                keys[i] = torch.cat((keys[i], k), 1)
                values[i] = torch.cat((values[i], v), 1)
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                keys[i].transpose(1, 2),
                values[i].transpose(1, 2),
                is_causal=step == 0,
                enable_gqa=True,
            ).transpose(1, 2)
            x = x + attn.o_proj(o.reshape(bsz, tokens.shape[1], -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        tokens = target.logits(target.norm(x[:, -1:])).argmax(-1)
        out.append(tokens)
    return torch.cat(out, 1)


@torch.no_grad()
def check_continuation(target: LlamaForCausalLM, seqs: torch.Tensor, prefix: int) -> float:
    """Share of generated positions where the uncached forward's argmax is the generated token."""
    hidden, _ = target(seqs[:, :-1], torch.arange(seqs.shape[1] - 1).expand(seqs.shape[0], -1))
    pred = target.logits(hidden).argmax(-1)[:, prefix - 1 :]
    return (pred == seqs[:, prefix:]).float().mean().item()


def self_distill_pool(
    target: LlamaForCausalLM,
    windows: torch.Tensor,
    prefix: int,
    batch: int,
    log,
) -> torch.Tensor:
    """windows (N, L) corpus windows -> (N, L): the first ``prefix`` tokens kept, the rest the
    target's greedy continuation. Generated ``batch`` windows at a time; the first batch is
    checked against the uncached forward (agreement below 99.9 % stops the run)."""
    target.eval()
    n, length = windows.shape
    out = []
    t0 = time.time()
    for s in range(0, n, batch):
        seqs = greedy_continue(target, windows[s : s + batch, :prefix], length - prefix)
        if s == 0:
            agree = check_continuation(target, seqs, prefix)
            log(f"self-distill: cached generation vs uncached forward argmax agreement {agree:.4f}")
            if agree < 0.999:
                raise RuntimeError(f"cached greedy generation disagrees with the forward ({agree:.4f})")
        out.append(seqs)
        done = s + seqs.shape[0]
        log(f"self-distill: {done}/{n} sequences, {done * (length - prefix) / (time.time() - t0):.0f} tok/s")
    return torch.cat(out)
