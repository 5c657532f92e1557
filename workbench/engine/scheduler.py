"""The scheduling loop: admit waiting requests, step the running batch, drop finished ones.

Under DP attention every rank runs the same sequence of phases; ``sync`` answers "does any
rank have X" so a rank without work joins with idle batches.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.engine.schedule_batch import Req, ScheduleBatch

AnyRank = Callable[[bool], bool]


def _local(flag: bool) -> bool:
    return flag


class Scheduler:
    def __init__(self, worker, max_running: int, any_rank: AnyRank | None = None) -> None:
        self.worker = worker
        self.max_running = max_running
        self.any_rank = any_rank or _local
        self.waiting: list[Req] = []
        self.running: ScheduleBatch | None = None
        self.finished: list[Req] = []

    def add(self, reqs: list[Req]) -> None:
        self.waiting.extend(reqs)

    def _n_running(self) -> int:
        return 0 if self.running is None else len(self.running)

    def _retire(self) -> None:
        if self.running is None:
            return
        done = self.worker.finished_mask(self.running)
        if done.any():
            self.finished.extend(r for r, d in zip(self.running.reqs, done.tolist(), strict=False) if d)
            self.worker.release(self.running, done)
            self.running = self.running.filter(~done)

    def step(self) -> bool:
        """One scheduling round. Returns False once no rank has anything left to do."""
        room = self.max_running - self._n_running()
        admit = self.waiting[:room] if room > 0 else []
        any_admit = self.any_rank(bool(admit))
        if any_admit:
            if admit:
                self.waiting = self.waiting[len(admit) :]
                self.running = ScheduleBatch.merge(self.running, self.worker.prefill(admit))
                self._retire()
            else:
                self.worker.prefill_idle()
        has_running = self._n_running() > 0
        if self.any_rank(has_running):
            if has_running:
                before = list(self.running.reqs)
                self.running = self.worker.decode(self.running)
                live = {id(r) for r in self.running.reqs}
                self.finished.extend(r for r in before if id(r) not in live)
                self._retire()
            else:
                self.worker.decode_idle()
        elif not any_admit:
            return self.any_rank(bool(self.waiting))
        return True

    @torch.inference_mode()
    def run(self) -> list[Req]:
        """Step until done; the finished requests by rid. Under inference mode, as upstream's event
        loop (``DynamicGradMode``): the round's bookkeeping ops skip autograd's dispatch too."""
        while self.step():
            pass
        return sorted(self.finished, key=lambda r: r.rid)
