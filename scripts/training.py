"""Training for the shipped tiny models: the target on the Python standard library's sources,
then the EAGLE3 head on the frozen target's hidden states with training-time test (the head is
unrolled ``ttt_steps`` draft steps on its own states, as at inference).

Run through ``scripts/train_models.py``; seeds and step counts fix the result. A script, not part of the
package: nothing the workbench runs imports it.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from workbench.models.eagle3 import Eagle3Head
from workbench.models.llama import LlamaForCausalLM
from workbench.models.model_config import ModelConfig
from workbench.models.tokenizer import EOS_ID


def stdlib_files() -> list[Path]:
    """The standard library's ``.py`` files, without test folders, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "__pycache__", "lib2to3"}
    return sorted(p for p in root.rglob("*.py") if not (set(p.relative_to(root).parts[:-1]) & skip))


def is_held_out(path: Path) -> bool:
    """2 % of files, chosen by a hash of the file name (stable across machines)."""
    return int(hashlib.sha256(path.name.encode()).hexdigest(), 16) % 50 == 0


def corpus(held_out: bool) -> torch.Tensor:
    """All train (or held-out) files as bytes, each followed by end-of-text: (N,) int64."""
    chunks = []
    for p in stdlib_files():
        if is_held_out(p) == held_out and p.stat().st_size > 0:
            chunks.append(torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8).long())
            chunks.append(torch.tensor([EOS_ID]))
    return torch.cat(chunks)


def batches(data: torch.Tensor, batch: int, seq: int, gen: torch.Generator):
    """Endless random windows: (batch, seq + 1) int64."""
    while True:
        starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
        yield torch.stack([data[s : s + seq + 1] for s in starts.tolist()])


def lr_at(step: int, total: int, peak: float, warmup: int = 50) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


def train_target(
    cfg: ModelConfig,
    steps: int,
    batch: int,
    seq: int,
    lr: float,
    seed: int,
    log: Callable[[str], object],
    build: Callable[[ModelConfig], nn.Module] = LlamaForCausalLM,
) -> nn.Module:
    """Next-byte training of ``build(cfg)`` (the workbench's Llama target, or the real runtime's
    Qwen3 target) on the corpus; the model returns (hidden (B, L, H), aux) and has ``logits``."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    data = corpus(held_out=False)
    t0 = time.time()
    for step, xb in zip(range(steps), batches(data, batch, seq, gen), strict=False):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr)
        pos = torch.arange(seq).expand(batch, seq)
        hidden, _ = model(xb[:, :-1], pos)
        loss = F.cross_entropy(model.logits(hidden).flatten(0, 1), xb[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            tps = (step + 1) * batch * seq / (time.time() - t0)
            log(
                f"target step {step}/{steps} loss {loss.item():.3f} ({loss.item() / math.log(2):.2f} bits/byte) "
                f"{tps:.0f} tok/s"
            )
    return model


@torch.no_grad()
def eval_bits_per_byte(model: nn.Module, seq: int = 256, max_windows: int = 64) -> float:
    data = corpus(held_out=True)
    n = min(max_windows, (data.numel() - 1) // seq)
    xb = torch.stack([data[i * seq : i * seq + seq + 1] for i in range(n)])
    hidden, _ = model(xb[:, :-1], torch.arange(seq).expand(n, seq))
    return F.cross_entropy(model.logits(hidden).flatten(0, 1), xb[:, 1:].flatten()).item() / math.log(2)


def ttt_mask(seq: int, step: int) -> torch.Tensor:
    """Boolean (seq, seq * (step + 1)) mask for draft step ``step`` of training-time test.

    Query p of step k sees step-0 keys at positions <= p (the draft KV the prefix left) and, for
    each earlier unrolled step j in 1..k, only the key at p (its own ancestors in the tree).
    """
    blocks = [torch.ones(seq, seq, dtype=torch.bool).tril()]
    blocks += [torch.eye(seq, dtype=torch.bool)] * step
    return torch.cat(blocks, dim=1)


def head_ttt_loss(
    head: Eagle3Head,
    xb: torch.Tensor,
    aux: torch.Tensor,
    target_logits: torch.Tensor,
    ttt_steps: int,
    agree_from: int = 0,
) -> tuple[torch.Tensor, list[float]]:
    """xb: (B, L+1) tokens; aux: (B, L, 3H) target states at 0..L-1; target_logits: (B, L, V).

    Step k at position p reads token p+1+k and the previous step's state at p, sits at RoPE
    position p+k, and is trained towards the target's distribution for token p+2+k.
    Returns the weighted loss and the top-1 agreement per step over positions >= ``agree_from``.
    """
    bsz, seq = aux.shape[0], aux.shape[1]
    attn = head.self_attn
    keys, values, hidden = [], [], aux
    total, accs = 0.0, []
    xb = F.pad(xb, (0, ttt_steps), value=EOS_ID)  # inputs past the window feed only unlabelled rows
    for k in range(ttt_steps):
        n = seq - 1 - k  # positions with both an input token and a label
        if n <= 0:
            break
        tok = xb[:, 1 + k : 1 + k + seq]
        pos = (torch.arange(seq) + k).expand(bsz, seq)
        x, residual = head.layer_input(tok, hidden)
        q, kk, v = attn.qkv(x, pos)
        keys.append(kk)
        values.append(v)
        mask = ttt_mask(seq, k)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            torch.cat(keys, 1).transpose(1, 2),
            torch.cat(values, 1).transpose(1, 2),
            attn_mask=mask,
            enable_gqa=True,
        ).transpose(1, 2)
        hidden = head.finish(attn.o_proj(o.reshape(bsz, seq, -1)), residual, None)
        logp = F.log_softmax(head.logits(hidden[:, :n]), dim=-1)
        p_t = F.softmax(target_logits[:, 1 + k : 1 + k + n], dim=-1)
        total = total + (0.8**k) * -(p_t * logp).sum(-1).mean()
        accs.append((logp[:, agree_from:].argmax(-1) == p_t[:, agree_from:].argmax(-1)).float().mean().item())
    return total, accs


def train_head(
    target: LlamaForCausalLM,
    cfg: ModelConfig,
    steps: int,
    batch: int,
    seq: int,
    lr: float,
    ttt_steps: int,
    seed: int,
    log,
    data: Iterator[torch.Tensor] | None = None,
    init: Eagle3Head | None = None,
    tag: str = "head",
) -> Eagle3Head:
    """Train an EAGLE3 head on ``data`` (default: random corpus windows), (batch, seq + 1) per step.

    ``init``: start from this head's weights (the self-distillation stage) instead of a new head
    with the target's embedding and lm_head."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        if init is not None:
            head.load_state_dict(init.state_dict())
        else:
            head.embed_tokens.weight.copy_(target.embed_tokens.weight)
            head.lm_head.weight.copy_(target.lm_head.weight)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    data = data if data is not None else batches(corpus(held_out=False), batch, seq, gen)
    target.eval()
    t0 = time.time()
    for step, xb in zip(range(steps), data, strict=False):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr)
        loss, accs = head_step_loss(target, head, xb, ttt_steps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            tps = (step + 1) * xb.numel() / (time.time() - t0)
            log(
                f"{tag} step {step}/{steps} loss {loss.item():.3f} top1/step {[round(a, 3) for a in accs]} "
                f"{tps:.0f} tok/s"
            )
    return head


def head_step_loss(
    target: LlamaForCausalLM, head: Eagle3Head, xb: torch.Tensor, ttt_steps: int, agree_from: int = 0
) -> tuple[torch.Tensor, list[float]]:
    """The target's states and logits over xb (B, L + 1), then the head's training-time-test loss."""
    bsz, seq = xb.shape[0], xb.shape[1] - 1
    with torch.no_grad():
        hidden, aux = target(xb[:, :-1], torch.arange(seq).expand(bsz, seq))
        tlogits = target.logits(hidden)
    return head_ttt_loss(head, xb, aux, tlogits, ttt_steps, agree_from)


@torch.no_grad()
def head_agreement(
    target: LlamaForCausalLM, head: Eagle3Head, xb: torch.Tensor, ttt_steps: int, agree_from: int = 0
) -> list[float]:
    """Top-1 agreement of the head with the target per training-time-test step on xb (B, L + 1),
    over the positions from ``agree_from`` on (where a draft step's first input is there)."""
    return head_step_loss(target, head, xb, ttt_steps, agree_from)[1]


def pool_batches(pool: torch.Tensor, batch: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless random batches of whole sequences from ``pool`` (N, L + 1)."""
    while True:
        yield pool[torch.randint(0, pool.shape[0], (batch,), generator=gen)]
