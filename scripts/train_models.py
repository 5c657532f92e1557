"""Train the shipped target and EAGLE3 head, pick the prompt set, and write them to workbench/assets.

    python scripts/train_models.py            # the shipped run (seed 0; about 70 min on a quiet 2-core box)
    python scripts/train_models.py --quick    # a smoke run into a scratch folder

Three stages: the target on the corpus; the head on corpus windows (``--head-steps``); the head
again on the target's own greedy continuations of corpus prefixes (``--distill-*``, self-distillation
as EAGLE-3 trains on the target's outputs). ``--target-from`` / ``--head-from`` load a stage's
result instead of training it.

The run is seeded, and the CPU numerics are pinned before torch loads (``PINNED``): MKL's
conditional numerical reproducibility on its AVX2 path, MKL's dynamic threading off, ATen's and
oneDNN's kernels at AVX2 whatever the host offers, and ``--threads`` torch threads (the partials of
a parallel reduction depend on the thread count). Measured on the 2-core box with 12 target steps:
the box's own AVX-512 kernels and the pinned AVX2 ones give other bytes, as do 1 thread and 2;
pinned, a run on the quiet box and three side by side under load give the same bytes. A variable
already set in the environment is kept, and TRAINING.json records the values the run had.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

PINNED = {
    "MKL_CBWR": "AVX2,STRICT",
    "MKL_DYNAMIC": "FALSE",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
for _name, _value in PINNED.items():
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.self_distill import greedy_continue, self_distill_pool  # noqa: E402
from scripts.training import (  # noqa: E402
    batches,
    corpus,
    eval_bits_per_byte,
    head_agreement,
    is_held_out,
    pool_batches,
    stdlib_files,
    train_head,
    train_target,
)
from workbench.models.eagle3 import Eagle3Head  # noqa: E402
from workbench.models.llama import LlamaForCausalLM  # noqa: E402
from workbench.models.loader import ASSETS, save_checkpoint  # noqa: E402
from workbench.models.model_config import ModelConfig, eagle3_aux_layers  # noqa: E402
from workbench.models.tokenizer import encode  # noqa: E402
from workbench.run.provenance import workbench_commit  # noqa: E402


def pick_prompts(n: int, length: int, per_file: int = 2) -> list:
    """``n`` distinct prompts from held-out files: ``length`` bytes from a line opening a def/class."""
    prompts, seen = [], set()
    for path in stdlib_files():
        if not is_held_out(path):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offset, taken = 0, 0
        for line in text.splitlines(keepends=True):
            chunk = text[offset : offset + length]
            if (
                offset > 0
                and taken < per_file
                and line.lstrip().startswith(("def ", "class "))
                and chunk.isascii()
                and len(chunk) == length
                and chunk[:60] not in seen
            ):
                prompts.append(chunk)
                seen.add(chunk[:60])
                taken += 1
                if len(prompts) == n:
                    return prompts
            offset += len(line)
    return prompts


def host_cpu() -> str:
    """The host's CPU model name (``/proc/cpuinfo``), or ``platform.processor()`` where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def load_for_training(cls, directory: Path):
    """A checkpoint as a trainable module (plain weight layout) and its config."""
    cfg = ModelConfig.from_json(directory / "config.json")
    model = cls(cfg)
    model.load_state_dict(load_file(str(directory / "model.safetensors")), strict=True)
    return model, cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ASSETS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--target-layers",
        type=int,
        default=8,
        help="target depth; the EAGLE3 head is one layer, so this sets the draft/target cost ratio",
    )
    ap.add_argument("--target-steps", type=int, default=1400)
    ap.add_argument("--head-steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--ttt-steps", type=int, default=4)
    ap.add_argument("--distill-pool", type=int, default=2048, help="corpus prefixes the target continues")
    ap.add_argument("--distill-prefix", type=int, default=128, help="corpus tokens before the continuation")
    ap.add_argument("--distill-steps", type=int, default=300, help="head steps on the target's continuations")
    ap.add_argument("--distill-ttt-steps", type=int, default=6)
    ap.add_argument("--distill-lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target-from", type=Path, default=None, help="load the target stage from this checkpoint")
    ap.add_argument("--head-from", type=Path, default=None, help="load the corpus head stage from this checkpoint")
    ap.add_argument("--quick", action="store_true", help="10 + 10 + 10 steps (pool 32) into ./runs/quick-models")
    args = ap.parse_args()
    if args.quick:
        args.target_steps, args.head_steps, args.out = 10, 10, Path("runs/quick-models")
        args.distill_steps, args.distill_pool = 10, 32
    torch.set_num_threads(args.threads)
    t0 = time.time()
    if args.target_from is not None:
        target, cfg = load_for_training(LlamaForCausalLM, args.target_from)
    else:
        cfg = ModelConfig(num_layers=args.target_layers, aux_layers=eagle3_aux_layers(args.target_layers))
        target = train_target(cfg, args.target_steps, args.batch, args.seq, 3e-3, args.seed, print)
    target.requires_grad_(False).eval()
    bpb = eval_bits_per_byte(target)
    print(f"target held-out bits/byte {bpb:.3f}")
    save_checkpoint(target, cfg, args.out / "models" / "target")
    head_cfg = ModelConfig(**{**cfg.__dict__, "num_layers": 1, "aux_layers": ()})
    if args.head_from is not None:
        head, _ = load_for_training(Eagle3Head, args.head_from)
    else:
        head = train_head(
            target, head_cfg, args.head_steps, args.batch, args.seq, 2e-3, args.ttt_steps, args.seed, print
        )
    prompts = pick_prompts(20, 160)
    # held-out check: the shipped prompts continued by the target, as speculative decoding sees them
    eval_set = greedy_continue(target, torch.tensor([encode(p) for p in prompts]), args.seq + 1 - 160)
    before = head_agreement(target, head, eval_set, args.distill_ttt_steps, 159)
    print(f"held-out top-1 agreement per draft step before self-distillation {before}")
    gen = torch.Generator().manual_seed(args.seed + 2)
    windows = next(batches(corpus(held_out=False), args.distill_pool, args.seq, gen))
    t_pool = time.time()
    pool = self_distill_pool(target, windows, args.distill_prefix, 128, print)
    t_pool = time.time() - t_pool
    head = train_head(
        target,
        head_cfg,
        args.distill_steps,
        args.batch,
        args.seq,
        args.distill_lr,
        args.distill_ttt_steps,
        args.seed + 3,
        print,
        data=pool_batches(pool, args.batch, gen),
        init=head,
        tag="self-distill",
    )
    after = head_agreement(target, head, eval_set, args.distill_ttt_steps, 159)
    print(f"held-out top-1 agreement per draft step after self-distillation {after}")
    save_checkpoint(head, head_cfg, args.out / "models" / "draft")
    (args.out / "prompts.json").write_text(
        json.dumps({"source": "held-out Python stdlib files", "prompts": prompts}, indent=1)
    )
    meta = {
        "command": " ".join(["python", "scripts/train_models.py", *sys.argv[1:]]),
        "commit": workbench_commit(),
        "seed": args.seed,
        "target_layers": cfg.num_layers,
        "target_steps": args.target_steps,
        "target_from": str(args.target_from) if args.target_from else None,
        "head_steps": args.head_steps,
        "head_from": str(args.head_from) if args.head_from else None,
        "batch": args.batch,
        "seq": args.seq,
        "ttt_steps": args.ttt_steps,
        "distill_pool": args.distill_pool,
        "distill_prefix": args.distill_prefix,
        "distill_steps": args.distill_steps,
        "distill_ttt_steps": args.distill_ttt_steps,
        "distill_lr": args.distill_lr,
        "distill_pool_s": round(t_pool, 1),
        "target_heldout_bits_per_byte": round(bpb, 4),
        "heldout_top1_per_draft_step_before_distill": [round(a, 4) for a in before],
        "heldout_top1_per_draft_step": [round(a, 4) for a in after],
        "heldout_top1_definition": "the head's top-1 vs the target's argmax per training-time-test step on the "
        "shipped prompts continued greedily by the target, over the generated positions "
        "(as speculative decoding meets them)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": args.threads,
        "numerics": {name: os.environ.get(name) for name in PINNED},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "host_cpu": host_cpu(),
        "wall_s": round(time.time() - t0, 1),
    }
    (args.out / "models" / "TRAINING.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
