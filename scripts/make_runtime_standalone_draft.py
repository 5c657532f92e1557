"""Write the real runtime's STANDALONE draft: the shipped Qwen3 target cut to its first layers.

    python scripts/make_runtime_standalone_draft.py              # 2 layers (the shipped draft)
    python scripts/make_runtime_standalone_draft.py --layers 4 --out DIR

SGLang's ``--speculative-algorithm STANDALONE`` drafts with an ordinary causal LM (``StandaloneWorkerV2``
loads it like a target). The lane's draft is a smaller ``Qwen3ForCausalLM`` taken from the target itself,
no training: its embedding, its first ``--layers`` decoder layers, its final norm and lm_head (the target
has 8 layers, so a draft step costs a quarter of a target step). Written as ``config.json`` +
``model.safetensors`` (HF names) with ``MADE.json`` under ``workbench/assets/runtime_models/standalone_draft``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "workbench" / "assets" / "runtime_models"


def cut(target: Path, layers: int) -> tuple[dict, dict]:
    """(config.json, state dict) of the target at ``target`` keeping decoder layers ``0 .. layers - 1``."""
    config = json.loads((target / "config.json").read_text())
    if not 1 <= layers < config["num_hidden_layers"]:
        raise SystemExit(f"bad --layers {layers}; valid: 1..{config['num_hidden_layers'] - 1}")
    sd = load_file(str(target / "model.safetensors"))
    keep = {}
    for name, tensor in sd.items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m is None or int(m.group(1)) < layers:
            keep[name] = tensor
    return {**config, "num_hidden_layers": layers}, keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=MODELS / "standalone_draft")
    args = ap.parse_args()
    config, sd = cut(MODELS / "target", args.layers)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file({k: v.contiguous() for k, v in sd.items()}, str(args.out / "model.safetensors"))
    made = {
        "command": " ".join(["python", "scripts/make_runtime_standalone_draft.py", *sys.argv[1:]]),
        "from": "workbench/assets/runtime_models/target",
        "layers": args.layers,
        "tensors": len(sd),
    }
    (args.out / "MADE.json").write_text(json.dumps(made, indent=1) + "\n")
    print(json.dumps(made, indent=1))


if __name__ == "__main__":
    main()
