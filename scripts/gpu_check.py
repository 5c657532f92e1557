"""The CUDA path, checked on a machine with a GPU (there is none on the 2-core box).

    python scripts/gpu_check.py [--num-prompts 4] [--max-new-tokens 32] [--json OUT]

For torch_native and triton (compiled there): greedy and EAGLE3 (5,4,16) at batch 1 with
``device="cuda"``. Prints, per run, the device the record names, the kernel label, tokens/s
and accept length, and checks that EAGLE3's outputs equal greedy's on the GPU and that
torch_native and triton agree; then the same torch_native runs on the CPU for comparison
(fp32 on both; token agreement is reported, not asserted, since GPU and CPU round differently).
Exits 1 when a run does not end ok or a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import workbench_kernels  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    workbench_kernels.setup("cuda")
    from workbench.models.loader import load_prompts
    from workbench.run.api import reproduce

    base = {"prompts": load_prompts()[: args.num_prompts], "max_new_tokens": args.max_new_tokens, "max_running": 1}
    rows, failures, outputs = [], [], {}
    for device, backends in (("cuda", ("torch_native", "triton")), ("cpu", ("torch_native",))):
        for backend in backends:
            for mode in ("greedy", "eagle"):
                r = reproduce({**base, "backend": backend, "mode": mode, "device": device})
                m = r.record.metrics
                row = {
                    "device_asked": device,
                    "device_recorded": r.record.env["device"],
                    "backend": backend,
                    "mode": mode,
                    "status": r.status,
                    "kernel": r.record.config["kernel"],
                    "tokens_per_s": m["tokens_per_s"],
                    "accept_length": m.get("accept_length_mean"),
                    "outputs_sha256": r.record.outputs_sha256,
                }
                rows.append(row)
                outputs[(device, backend, mode)] = r.record.outputs_sha256
                print(json.dumps(row))
                if r.status != "ok":
                    failures.append(f"{device} {backend} {mode} ended {r.status}")
                if not row["device_recorded"].startswith(device):
                    failures.append(f"{device} {backend} {mode}: the record names device {row['device_recorded']}")
    for backend in ("torch_native", "triton"):
        if outputs[("cuda", backend, "eagle")] != outputs[("cuda", backend, "greedy")]:
            failures.append(f"cuda {backend}: EAGLE3 outputs differ from greedy")
    if outputs[("cuda", "triton", "greedy")] != outputs[("cuda", "torch_native", "greedy")]:
        failures.append("cuda: triton and torch_native greedy outputs differ")
    same = outputs[("cuda", "torch_native", "greedy")] == outputs[("cpu", "torch_native", "greedy")]
    print(f"torch_native greedy outputs identical on cuda and cpu: {same}")
    print("FAILED:\n  " + "\n  ".join(failures) if failures else "all checks hold")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "failures": failures, "cuda_equals_cpu": same}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
