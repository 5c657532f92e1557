"""What the hook seam costs per forward: one target DECODE forward (batch 1, torch_native, the
shipped 8-layer model, 1 torch thread) with nobody watching, with the timing observer alone (what a
dp 1 run's timing costs), and with a DP rank's observers (``workbench.run.rank_run.observers``: timing,
the event stream into a sink that drops events, crash capture). Rounds alternate between the
workers so machine noise spreads over all of them.

    python benchmarks/bench_hook_overhead.py [--rounds 30] [--forwards 40] [--seam-only]

Prints per-forward medians, 10th percentiles and minima, and per watched worker the median over
rounds of the per-round difference of medians against the bare one, and the differences of the 10th
percentiles and of the minima (the overhead), in microseconds. On a busy machine a forward's time
swings by more than the overhead; the second measurement isolates the seam: the engine's own
``WorkerBase.run``, ``ModelRunner.forward`` and ``AttentionBackend.forward`` around a stub model of 8
layers and a backend that computes nothing (no tensors), bare and watched, as the minimum over
repeats of ``timeit`` (short CPU bursts, so the minimum holds on a busy machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from types import SimpleNamespace

import torch

import workbench_kernels
from workbench.backends.base import AttentionBackend
from workbench.engine.forward_batch import ForwardBatch
from workbench.engine.forward_mode import ForwardMode
from workbench.engine.hooks import NO_HOOKS, Hooks
from workbench.engine.metrics import Metrics
from workbench.engine.model_runner import ModelRunner
from workbench.engine.schedule_batch import Req
from workbench.engine.worker import WorkerBase
from workbench.models.tokenizer import encode
from workbench.run.config import RunConfig
from workbench.run.rank_run import build_worker, observers
from workbench.run.timing import Timing


class DropEvents:
    def put(self, event: tuple) -> None:
        pass


def decode_batch(worker: WorkerBase):
    """A one-request DECODE batch after a prefill; running it again rewrites the same KV slot."""
    batch = worker.prefill([Req(0, encode("def f(x):\n"), 8)])
    slots = worker.memory.allocator.alloc(1)
    table = worker.memory.req_to_token_pool.req_to_token
    table[batch.req_pool_indices, batch.seq_lens] = slots.to(table.dtype)
    return worker.target.make_batch(
        ForwardMode.DECODE,
        input_ids=batch.output_ids,
        positions=batch.seq_lens.clone(),
        req_pool_indices=batch.req_pool_indices,
        seq_lens=batch.seq_lens + 1,
        out_cache_loc=slots,
    )


def timed(worker: WorkerBase, fb, n: int) -> list[float]:
    out = []
    for _ in range(n):
        fb.attn_metadata = None
        t0 = time.perf_counter()
        worker.run(worker.target, fb)
        out.append(time.perf_counter() - t0)
    return out


class NullBackend(AttentionBackend):
    """A backend that computes nothing: what remains of a forward is the engine's own calls."""

    name = "null"

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        pass

    def forward_decode(self, q, layer_id, forward_batch):
        return q

    def forward_extend(self, q, k, v, layer_id, forward_batch):
        return q


def seam_cost(hooks: Hooks, layers: int = 8, number: int = 20000) -> float:
    """Microseconds per forward of the real WorkerBase.run / ModelRunner.forward / AttentionBackend.forward
    around a stub model whose ``layers`` layers only call the backend; minimum over 7 repeats."""
    runner = ModelRunner.__new__(ModelRunner)
    runner.name, runner.hooks, runner.is_draft = "target", hooks, False
    runner.attn_backend = NullBackend(None)
    runner.model = lambda ids, pos, fb: [fb.attn_backend.forward(None, None, None, i, fb) for i in range(layers)]
    worker = WorkerBase.__new__(WorkerBase)
    worker.hooks, worker.current = hooks, {}
    kv = SimpleNamespace(set_kv=lambda *a: None)
    fb = SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        batch_size=1,
        dp_comm=None,
        attn_metadata=None,
        hooks=hooks,
        kv_cache=kv,
        out_cache_loc=None,
        input_ids=None,
        positions=None,
        attn_backend=runner.attn_backend,
    )

    def one() -> None:
        fb.attn_metadata = None
        worker.run(runner, fb)

    return min(timeit.repeat(one, number=number, repeat=7)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--forwards", type=int, default=40, help="forwards per worker per round")
    ap.add_argument("--seam-only", action="store_true", help="only the seam's own calls (no model)")
    args = ap.parse_args()
    workbench_kernels.setup()
    torch.set_num_threads(1)
    cfg = RunConfig(backend="torch_native", mode="greedy").validate()
    seam = {
        "bare": seam_cost(NO_HOOKS),
        "timing": seam_cost(Hooks([Timing(Metrics())])),
        "rank": seam_cost(Hooks(observers(cfg, 0, Metrics(), None, DropEvents(), dp=False))),
    }
    print(
        "the seam alone, per forward of 8 layers (engine calls around a stub model, min of 7 x 20000): "
        + ", ".join(f"{k} {v:.2f} us" for k, v in seam.items())
        + f"; timing costs {seam['timing'] - seam['bare']:.2f} us, "
        + f"a DP rank's observers {seam['rank'] - seam['bare']:.2f} us"
    )
    if args.seam_only:
        return
    timing_metrics, rank_metrics = Metrics(), Metrics()
    workers = {
        "bare": build_worker(cfg),
        "timing": build_worker(cfg, metrics=timing_metrics, hooks=Hooks([Timing(timing_metrics)])),
        "rank": build_worker(
            cfg, metrics=rank_metrics, hooks=Hooks(observers(cfg, 0, rank_metrics, None, DropEvents(), dp=False))
        ),
    }
    batches = {name: decode_batch(w) for name, w in workers.items()}
    for name, w in workers.items():
        timed(w, batches[name], 20)  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in workers}
    diffs: dict[str, list[float]] = {name: [] for name in workers if name != "bare"}
    for _ in range(args.rounds):
        medians = {}
        for name, w in workers.items():
            xs = timed(w, batches[name], args.forwards)
            samples[name] += xs
            medians[name] = statistics.median(xs)
        for name in diffs:
            diffs[name].append(medians[name] - medians["bare"])

    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[int(p * (len(xs) - 1))] * 1e6

    for name, xs in samples.items():
        print(
            f"{name:7s} decode forward: median {pct(xs, 0.5):.0f} us, p10 {pct(xs, 0.1):.0f} us, "
            f"min {min(xs) * 1e6:.0f} us (n={len(xs)})"
        )
    for name, ds in diffs.items():
        print(
            f"overhead, {name}: median of per-round differences {statistics.median(ds) * 1e6:.1f} us, "
            f"p10 difference {pct(samples[name], 0.1) - pct(samples['bare'], 0.1):.1f} us, "
            f"min difference {(min(samples[name]) - min(samples['bare'])) * 1e6:.1f} us "
            f"({args.rounds} rounds x {args.forwards} forwards)"
        )


if __name__ == "__main__":
    main()
