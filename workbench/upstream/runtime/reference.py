"""HF transformers' greedy tokens for the real runtime's target, run inside the release environment.

Never imported by the workbench; started by ``release_process`` (target ``runtime.reference``) on a
config ``{"model_path", "prompts": [[ids]], "max_new_tokens", "result_path"}``. Loads the target with
``AutoModelForCausalLM`` in float32 (the weights the runtime loads) and decodes each prompt
greedily without a cache: the full sequence is re-run at every step, so nothing of SGLang (paged
KV, spec decoding, DP) is involved. Writes ``{"outputs": [[ids]], "transformers": version}`` to
``result_path`` (``in_release.result_channel``).
"""

import json
import sys
import time

from ..in_release.result_channel import write


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    t0 = time.time()
    import torch
    import transformers

    torch.set_num_threads(cfg.get("threads", 1))
    model = transformers.AutoModelForCausalLM.from_pretrained(cfg["model_path"], dtype=torch.float32)
    model.eval()
    outputs = []
    with torch.no_grad():
        for ids in cfg["prompts"]:
            seq = torch.tensor([ids], dtype=torch.long)
            new = []
            for _ in range(cfg["max_new_tokens"]):
                logits = model(input_ids=seq).logits[0, -1]
                nxt = int(torch.argmax(logits))
                new.append(nxt)
                seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
            outputs.append(new)
    out = {
        "outputs": outputs,
        "transformers": transformers.__version__,
        "architecture": type(model).__name__,
        "reference_s": round(time.time() - t0, 2),
    }
    write(cfg["result_path"], out)
