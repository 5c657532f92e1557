"""Train the real runtime's EAGLE (EAGLE-1) draft for the shipped Qwen3 target, in SGLang's format.

    python scripts/train_runtime_eagle_draft.py            # the shipped run (seed 0)
    python scripts/train_runtime_eagle_draft.py --quick    # a smoke run into ./runs/quick-eagle-draft

SGLang's ``--speculative-algorithm EAGLE`` feeds its draft the target's last hidden state (the one its
logits processor reads, after the final norm) and loads the draft as ``LlamaForCausalLMEagle``
(``models/llama_eagle.py``): ``fc`` (2H -> H, with bias) over ``[embed(token) | hidden]``, Llama decoder
layers of which layer 0 has no input norm, no final norm, and the target's embedding and lm_head
(``set_embed_and_head``). This script builds that head, loads the frozen target from
``workbench/assets/runtime_models/target``, and trains the head's one-step prediction (KL to the
target's next-token distribution) on the same standard-library bytes as the target. Written as
``config.json`` + ``model.safetensors`` (the names SGLang's loader prefixes with ``model.``) and
``TRAINING.json`` under ``workbench/assets/runtime_models/eagle_draft``.
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
from safetensors.torch import load_file, save_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.train_runtime_models import OUT, Qwen3Target  # noqa: E402
from scripts.training import batches, corpus, lr_at  # noqa: E402
from workbench.models.layers import RMSNorm, Rotary, SwiGLU  # noqa: E402
from workbench.models.model_config import ModelConfig  # noqa: E402
from workbench.models.tokenizer import EOS_ID  # noqa: E402

TARGET = OUT / "target"
DRAFT = OUT / "eagle_draft"


def load_target(directory: Path = TARGET) -> tuple[Qwen3Target, ModelConfig]:
    """The shipped Qwen3 target (HF names, as ``train_runtime_models.target_files`` wrote them), frozen."""
    config = json.loads((directory / "config.json").read_text())
    cfg = ModelConfig(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        num_kv_heads=config["num_key_value_heads"],
        head_dim=config["head_dim"],
        intermediate_size=config["intermediate_size"],
        rms_eps=config["rms_norm_eps"],
        max_position=config["max_position_embeddings"],
        rope_theta=config["rope_theta"],
        aux_layers=(0,),  # Qwen3Target also returns these (unused here)
    )
    sd = load_file(str(directory / "model.safetensors"))
    model = Qwen3Target(cfg)
    own = {"embed_tokens.weight": sd.pop("model.embed_tokens.weight"), "norm.weight": sd.pop("model.norm.weight")}
    own["lm_head.weight"] = sd.pop("lm_head.weight")
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
            own[f"layers.{i}.self_attn.{name}.weight"] = sd.pop(f"{p}.self_attn.{name}.weight")
        for name in ("input_layernorm", "post_attention_layernorm"):
            own[f"layers.{i}.{name}.weight"] = sd.pop(f"{p}.{name}.weight")
        gate, up = sd.pop(f"{p}.mlp.gate_proj.weight"), sd.pop(f"{p}.mlp.up_proj.weight")
        own[f"layers.{i}.mlp.gate_up_proj.weight"] = torch.cat((gate, up), dim=0)
        own[f"layers.{i}.mlp.down_proj.weight"] = sd.pop(f"{p}.mlp.down_proj.weight")
    if sd:
        raise ValueError(f"target weights not used: {sorted(sd)[:5]}")
    model.load_state_dict(own)
    return model.eval().requires_grad_(False), cfg


class EagleHead(nn.Module):
    """SGLang's ``LlamaForCausalLMEagle`` with one layer: fc over [embed | hidden], a Llama layer without
    its input norm, no final norm; the embedding and lm_head are the target's (frozen)."""

    def __init__(self, cfg: ModelConfig, target: Qwen3Target) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.cfg, self.target = cfg, target
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.q_proj = nn.Linear(h, cfg.num_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * cfg.head_dim, h, bias=False)
        self.rotary = Rotary(cfg.head_dim, cfg.max_position, cfg.rope_theta)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)

    def forward(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens (B, L), hidden (B, L, H): row t reads token t+1 and the target's hidden at t. Logits (B, L, V)."""
        b, n = tokens.shape
        cfg = self.cfg
        x = self.fc(torch.cat((self.target.embed_tokens(tokens), hidden), dim=-1))
        q = self.rotary(self.q_proj(x).view(b, n, cfg.num_heads, cfg.head_dim), positions)
        k = self.rotary(self.k_proj(x).view(b, n, cfg.num_kv_heads, cfg.head_dim), positions)
        v = self.v_proj(x).view(b, n, cfg.num_kv_heads, cfg.head_dim)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        x = x + self.o_proj(o.transpose(1, 2).reshape(b, n, -1))
        x = x + self.mlp(self.post_attention_layernorm(x))
        return self.target.lm_head(x)


def train(head: EagleHead, args: argparse.Namespace) -> float:
    """KL from the target's next-token distribution at t+1 to the head's row t; returns the last batch's top-1
    agreement with the target's greedy token."""
    gen = torch.Generator().manual_seed(args.seed + 1)
    params = [p for n, p in head.named_parameters() if not n.startswith("target.")]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    seq, agree = args.seq, 0.0
    positions = torch.arange(seq - 1).expand(args.batch, seq - 1)
    t0 = time.time()
    for step, xb in zip(range(args.steps), batches(corpus(held_out=False), args.batch, seq, gen), strict=False):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr)
        with torch.no_grad():
            hidden, _ = head.target(xb[:, :-1], torch.arange(seq).expand(args.batch, seq))
            want = F.log_softmax(head.target.logits(hidden[:, 1:]), dim=-1)  # the target's prediction at t+1
        logits = head(xb[:, 1:-1], hidden[:, :-1], positions)
        loss = F.kl_div(F.log_softmax(logits, dim=-1), want, log_target=True, reduction="batchmean") / (seq - 1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        agree = (logits.argmax(-1) == want.argmax(-1)).float().mean().item()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step}/{args.steps} loss {loss.item():.3f} top1 {agree:.3f} {time.time() - t0:.0f}s")
    return round(agree, 3)


def draft_files(head: EagleHead, cfg: ModelConfig) -> tuple[dict, dict]:
    """(config.json SGLang loads as LlamaForCausalLMEagle, its weights; no embedding or lm_head: the target's)."""
    config = {
        "architectures": ["LlamaForCausalLMEagle"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
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
    gate, up = head.mlp.gate_up_proj.weight.chunk(2, dim=0)
    sd = {"fc.weight": head.fc.weight, "fc.bias": head.fc.bias}
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        sd[f"layers.0.self_attn.{name}.weight"] = getattr(head, name).weight
    sd["layers.0.post_attention_layernorm.weight"] = head.post_attention_layernorm.weight
    sd.update(
        {
            "layers.0.mlp.gate_proj.weight": gate,
            "layers.0.mlp.up_proj.weight": up,
            "layers.0.mlp.down_proj.weight": head.mlp.down_proj.weight,
        }
    )
    return config, sd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help=f"default {DRAFT} (--quick: runs/quick-eagle-draft)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (more thrash on a shared 2-core box)")
    ap.add_argument("--quick", action="store_true", help="10 steps into ./runs/quick-eagle-draft")
    args = ap.parse_args()
    if args.quick:
        args.steps = 10
    args.out = args.out or (Path("runs/quick-eagle-draft") if args.quick else DRAFT)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    target, cfg = load_target()
    head = EagleHead(cfg, target)
    agree = train(head, args)
    config, sd = draft_files(head, cfg)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file({k: v.detach().contiguous() for k, v in sd.items()}, str(args.out / "model.safetensors"))
    meta = {
        "command": " ".join(["python", "scripts/train_runtime_eagle_draft.py", *sys.argv[1:]]),
        "seed": args.seed,
        "target": str(TARGET.relative_to(OUT.parents[2])),
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "loss": "KL to the target's next-token distribution, one draft step (no training-time test)",
        "last_batch_top1": agree,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "wall_s": round(time.time() - t0, 1),
    }
    (args.out / "TRAINING.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
