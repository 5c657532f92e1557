"""Train the real runtime's tiny models and write them in SGLang's own formats.

    python scripts/train_runtime_models.py            # the shipped run (seed 0)
    python scripts/train_runtime_models.py --quick    # a smoke run into ./runs/quick-runtime-models

A Qwen3-style target (``Qwen3ForCausalLM``: Llama + an RMSNorm over each head of q and k, before
RoPE; SGLang's Qwen3 layers carry the DP-attention gathers, Llama's do not) and an EAGLE3 head that
SGLang loads as ``LlamaForCausalLMEagle3`` (fc over the inputs of target layers [2, n // 2, n - 3],
SGLang's default taps, one decoder layer over [norm(embed) | norm(hidden)], its own norm and
lm_head; the embedding is the target's, as SGLang shares it). Byte-level, trained on this Python's
standard library like the workbench's own models. Written as ``config.json`` + ``model.safetensors``
(HF names) under ``workbench/assets/runtime_models/{target,draft}`` with ``TRAINING.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.training import batches, corpus, eval_bits_per_byte, head_ttt_loss, lr_at, train_target  # noqa: E402
from workbench.models.eagle3 import Eagle3Head  # noqa: E402
from workbench.models.layers import RMSNorm, Rotary, SwiGLU  # noqa: E402
from workbench.models.loader import ASSETS  # noqa: E402
from workbench.models.model_config import ModelConfig, eagle3_aux_layers  # noqa: E402
from workbench.models.tokenizer import EOS_ID  # noqa: E402

OUT = ASSETS / "runtime_models"


class Qwen3Attention(nn.Module):
    """GQA attention with Qwen3's per-head q/k RMSNorm (applied before RoPE)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_eps)
        self.rotary = Rotary(cfg.head_dim, cfg.max_position, cfg.rope_theta)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (B, L, H), causal over each row."""
        b, n = x.shape[:2]
        q = self.q_norm(self.q_proj(x).view(b, n, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(b, n, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(b, n, self.num_kv_heads, self.head_dim)
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        return self.o_proj(o.transpose(1, 2).reshape(b, n, -1))


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.self_attn = Qwen3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Target(nn.Module):
    """``forward`` returns (final-normed hidden (B, L, H), aux (B, L, 3H)) like the workbench's target."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen3Layer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, aux = self.embed_tokens(input_ids), []
        for i, layer in enumerate(self.layers):
            x = layer(x, positions)
            if i in self.config.aux_layers:
                aux.append(x)
        return self.norm(x), torch.cat(aux, dim=-1)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)


def train_head(target: Qwen3Target, cfg: ModelConfig, args: argparse.Namespace) -> tuple[Eagle3Head, list]:
    """The workbench's training-time-test loss; the embedding stays the target's (frozen)."""
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    head = Eagle3Head(cfg)
    head.embed_tokens.weight = target.embed_tokens.weight  # shared and frozen, as SGLang's set_embed
    with torch.no_grad():
        head.lm_head.weight.copy_(target.lm_head.weight)
    params = [p for n, p in head.named_parameters() if not n.startswith("embed_tokens")]
    opt = torch.optim.AdamW(params, lr=2e-3, betas=(0.9, 0.95), weight_decay=0.0)
    t0, steps, seq, accs = time.time(), args.head_steps, args.seq, []
    for step, xb in zip(range(steps), batches(corpus(held_out=False), args.batch, seq, gen), strict=False):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, 2e-3)
        with torch.no_grad():
            hidden, aux = target(xb[:, :-1], torch.arange(seq).expand(args.batch, seq))
            tlogits = target.logits(hidden)
        loss, accs = head_ttt_loss(head, xb, aux, tlogits, args.ttt_steps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            tps = (step + 1) * args.batch * seq / (time.time() - t0)
            print(
                f"head step {step}/{steps} loss {loss.item():.3f} top1/step {[round(a, 2) for a in accs]} "
                f"{tps:.0f} tok/s"
            )
    return head, [round(a, 3) for a in accs]


def _split_swiglu(prefix: str, mlp: SwiGLU) -> dict[str, torch.Tensor]:
    gate, up = mlp.gate_up_proj.weight.chunk(2, dim=0)
    return {
        f"{prefix}.gate_proj.weight": gate,
        f"{prefix}.up_proj.weight": up,
        f"{prefix}.down_proj.weight": mlp.down_proj.weight,
    }


def target_files(model: Qwen3Target, cfg: ModelConfig) -> tuple[dict, dict]:
    """(HF Qwen3 config.json, HF-named state dict)."""
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "eos_token_id": EOS_ID,
        "bos_token_id": None,
    }
    sd = {"model.embed_tokens.weight": model.embed_tokens.weight, "model.norm.weight": model.norm.weight}
    sd["lm_head.weight"] = model.lm_head.weight
    for i, layer in enumerate(model.layers):
        p, a = f"model.layers.{i}", layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[f"{p}.self_attn.{name}.weight"] = getattr(a, name).weight
        sd[f"{p}.self_attn.q_norm.weight"], sd[f"{p}.self_attn.k_norm.weight"] = a.q_norm.weight, a.k_norm.weight
        sd[f"{p}.input_layernorm.weight"] = layer.input_layernorm.weight
        sd[f"{p}.post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
        sd.update(_split_swiglu(f"{p}.mlp", layer.mlp))
    return config, sd


def draft_files(head: Eagle3Head, cfg: ModelConfig) -> tuple[dict, dict]:
    """(config.json SGLang loads as LlamaForCausalLMEagle3, its weights; no embedding: the target's)."""
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": cfg.vocab_size,  # its own lm_head over the full vocab: no d2t map
        "hidden_size": cfg.hidden_size,
        "target_hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "eos_token_id": EOS_ID,
    }
    a = head.self_attn
    sd = {"fc.weight": head.fc.weight, "norm.weight": head.norm.weight, "lm_head.weight": head.lm_head.weight}
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[f"midlayer.self_attn.{name}.weight"] = getattr(a, name).weight
    sd["midlayer.input_layernorm.weight"] = head.input_layernorm.weight
    sd["midlayer.hidden_norm.weight"] = head.hidden_norm.weight
    sd["midlayer.post_attention_layernorm.weight"] = head.post_attention_layernorm.weight
    sd.update(_split_swiglu("midlayer.mlp", head.mlp))
    return config, sd


def write(directory: Path, config: dict, sd: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file({k: v.detach().contiguous() for k, v in sd.items()}, str(directory / "model.safetensors"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help=f"default {OUT} (--quick: runs/quick-runtime-models)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--target-steps", type=int, default=1200)
    ap.add_argument("--head-steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ttt-steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (more thrash on a shared 2-core box)")
    ap.add_argument("--quick", action="store_true", help="10 + 10 steps into ./runs/quick-runtime-models")
    args = ap.parse_args()
    if args.quick:
        args.target_steps, args.head_steps = 10, 10
    args.out = args.out or (Path("runs/quick-runtime-models") if args.quick else OUT)
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=4,
        num_kv_heads=2,
        head_dim=args.hidden // 4,
        intermediate_size=args.intermediate,
        rms_eps=1e-6,
        max_position=1024,
        aux_layers=eagle3_aux_layers(args.layers),
    )
    t0 = time.time()
    target = train_target(cfg, args.target_steps, args.batch, args.seq, 3e-3, args.seed, print, build=Qwen3Target)
    target.eval().requires_grad_(False)
    bpb = eval_bits_per_byte(target, args.seq)
    print(f"target held-out bits/byte {bpb:.3f}")
    write(args.out / "target", *target_files(target, cfg))
    head_cfg = ModelConfig(**{**cfg.__dict__, "num_layers": 1, "aux_layers": ()})
    head, accs = train_head(target, head_cfg, args)
    write(args.out / "draft", *draft_files(head, head_cfg))
    meta = {
        "command": " ".join(["python", "scripts/train_runtime_models.py", *sys.argv[1:]]),
        "seed": args.seed,
        "target": {
            "layers": args.layers,
            "hidden": args.hidden,
            "intermediate": args.intermediate,
            "steps": args.target_steps,
        },
        "head_steps": args.head_steps,
        "batch": args.batch,
        "seq": args.seq,
        "ttt_steps": args.ttt_steps,
        "target_heldout_bits_per_byte": round(bpb, 4),
        "head_last_batch_top1_per_step": accs,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "wall_s": round(time.time() - t0, 1),
    }
    (args.out / "TRAINING.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
