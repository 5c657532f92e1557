"""Train the shipped target and EAGLE3 head, pick the prompt set, and write them to workbench/assets.

    python scripts/train_models.py            # the shipped run (seed 0; about an hour on 2 cores)
    python scripts/train_models.py --quick    # a smoke run into a scratch folder

Everything is deterministic for a given seed, step counts and standard library.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.training import (  # noqa: E402
    eval_bits_per_byte,
    is_held_out,
    stdlib_files,
    train_head,
    train_target,
)
from workbench.models.config import ModelConfig, eagle3_aux_layers  # noqa: E402
from workbench.models.loader import ASSETS, save_checkpoint  # noqa: E402


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
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="10 + 10 steps into ./runs/quick-models")
    args = ap.parse_args()
    if args.quick:
        args.target_steps, args.head_steps, args.out = 10, 10, Path("runs/quick-models")
    torch.set_num_threads(args.threads)
    cfg = ModelConfig(num_layers=args.target_layers, aux_layers=eagle3_aux_layers(args.target_layers))
    t0 = time.time()
    target = train_target(cfg, args.target_steps, args.batch, args.seq, 3e-3, args.seed, print)
    bpb = eval_bits_per_byte(target)
    print(f"target held-out bits/byte {bpb:.3f}")
    save_checkpoint(target, cfg, args.out / "models" / "target")
    head_cfg = ModelConfig(**{**cfg.__dict__, "num_layers": 1, "aux_layers": ()})
    head = train_head(target, head_cfg, args.head_steps, args.batch, args.seq, 2e-3, args.ttt_steps, args.seed, print)
    save_checkpoint(head, head_cfg, args.out / "models" / "draft")
    prompts = pick_prompts(20, 160)
    (args.out / "prompts.json").write_text(
        json.dumps({"source": "held-out Python stdlib files", "prompts": prompts}, indent=1)
    )
    meta = {
        "command": " ".join(["python", "scripts/train_models.py", *sys.argv[1:]]),
        "seed": args.seed,
        "target_layers": args.target_layers,
        "target_steps": args.target_steps,
        "head_steps": args.head_steps,
        "batch": args.batch,
        "seq": args.seq,
        "ttt_steps": args.ttt_steps,
        "target_heldout_bits_per_byte": round(bpb, 4),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "wall_s": round(time.time() - t0, 1),
    }
    (args.out / "models" / "TRAINING.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
