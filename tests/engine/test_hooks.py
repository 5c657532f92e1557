"""The hook seam: a run's observers see the engine through ``workbench.engine.hooks`` only. After a
traced run (timing, the rank event stream, crash capture all watching) every method of the worker,
its model runners, their backends and the metrics is still the class's own, and no class changed."""

from __future__ import annotations

import inspect

import pytest

from workbench.backends import backend_names, get_backend_class
from workbench.backends.multi_step import MultiStepDraftBackend
from workbench.engine.hooks import EVENTS, Hooks, Observer
from workbench.engine.metrics import Metrics
from workbench.engine.model_runner import ModelRunner
from workbench.engine.worker import GreedyWorker, WorkerBase
from workbench.run import rank_run as runner
from workbench.run.config import RunConfig
from workbench.run.dp.comm import DPCommunicator
from workbench.speculative.eagle_worker import EagleWorker

SMALL = dict(steps=3, topk=2, draft_tokens=4, max_new_tokens=6, max_running=2)
CLASSES = (
    EagleWorker,
    GreedyWorker,
    WorkerBase,
    ModelRunner,
    MultiStepDraftBackend,
    Metrics,
    DPCommunicator,
    *(get_backend_class(b) for b in backend_names()),
)


def _methods(cls: type) -> dict[str, object]:
    return {k: v for k, v in vars(cls).items() if inspect.isfunction(v)}


def _shadowed(obj: object) -> list[str]:
    """Instance attributes that hide a method of the object's class, and methods not bound to the class's own."""
    cls = type(obj)
    out = [k for k, v in vars(obj).items() if callable(v) and inspect.isfunction(getattr(cls, k, None))]
    for name in dir(cls):
        own = inspect.getattr_static(cls, name)
        if inspect.isfunction(own) and getattr(getattr(obj, name), "__func__", None) is not own:
            out.append(name)
    return out


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def put(self, event: tuple) -> None:
        self.events.append(event)


@pytest.mark.parametrize("mode", ["eagle", "greedy"])
def test_a_traced_run_leaves_every_method_the_classes_own(monkeypatch, prompts, mode):
    before = {cls: _methods(cls) for cls in CLASSES}
    built, real = [], runner.build_worker

    def keep(*a, **kw):  # the test keeps the worker the run builds, to look at it afterwards
        built.append(real(*a, **kw))
        return built[-1]

    monkeypatch.setattr(runner, "build_worker", keep)
    sink = Sink()
    cfg = RunConfig(backend="triton", mode=mode, prompts=prompts[:2], warmup=False, **SMALL).validate()
    res = runner.run_rank(cfg, cfg.prompts, [0, 1], events=sink)
    assert res.crash is None and len(res.outputs) == 2
    (worker,) = built
    watched = [worker, worker.metrics, worker.target, worker.target.attn_backend]
    if mode == "eagle":
        watched += [worker.draft, worker.draft.attn_backend, worker.draft.draft_attn_backend]
    assert {type(o).__name__: _shadowed(o) for o in watched} == {type(o).__name__: [] for o in watched}
    assert {cls: _methods(cls) for cls in CLASSES} == before
    # and the observers did watch: one forward event per timed forward, the phases and accepts streamed
    kinds = [e[0] for e in sink.events]
    forwards = sum(len(v) for v in res.metrics.samples["forward_s"].values())
    assert kinds.count("forward") == forwards > 0
    assert kinds.count("latency") == sum(len(v) for v in res.metrics.samples["latency_s"].values())
    assert kinds.count("accepts") == (len(res.metrics.samples["latency_s"]["verify"]) if mode == "eagle" else 0)


class Counting(Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_forward(self, model, forward_batch, seconds) -> None:
        self.seen.append(model)


def test_hooks_call_only_the_observers_that_take_an_event():
    counting, idle = Counting(), Observer()
    hooks = Hooks([idle, counting])
    assert hooks.times_forwards and not hooks.times_attention and not hooks.times_metadata
    hooks.on_forward("target", None, 0.1)
    hooks.on_attention(0, None, 0.1)  # nobody takes it: nothing runs
    assert counting.seen == ["target"]
    assert all(callable(getattr(hooks, e)) for e in EVENTS)
    assert not Hooks().times_forwards
