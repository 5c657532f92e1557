"""The idle rank's verify pass as upstream runs it (upstream finding triton|IDLE|EagleVerifyInput|kv_indptr):
upstream's ``EagleVerifyInput`` idle input on a padded IDLE batch; eager, the kv_indptr-reading backends
raise on it exactly as the real 0.5.10-0.5.23 triton backend does; replayed from a graph, or with the
proposed fix (``kv_indptr`` None), they build the seq_lens metadata."""

from __future__ import annotations

import os

import pytest
import torch

from workbench import reproduce
from workbench.backends import BackendContext, create_backend
from workbench.backends.fallback import seq_lens_kv_metadata
from workbench.engine.hooks import NO_HOOKS
from workbench.engine.model_runner import Memory, ModelRunner
from workbench.mem.pool import KVCache, ReqToTokenPool, TokenSlotAllocator
from workbench.run.config import ConfigError, RunConfig
from workbench.speculative.verify_idle import idle_verify_input

MESSAGE = "'EagleVerifyInput' object has no attribute 'kv_indptr'"


class _Padded:
    """A dp_comm stand-in: only its presence matters to ``idle_batch`` (the DP padding)."""


def _runner(backend: str) -> ModelRunner:
    runner = ModelRunner.__new__(ModelRunner)
    runner.memory = Memory(ReqToTokenPool(4, 16), TokenSlotAllocator(32))
    runner.kv_cache = KVCache(1, 32, 1, 16, torch.float32)
    runner.dp_comm = _Padded()
    runner.hooks = NO_HOOKS  # what the constructor sets when nothing watches the run
    runner.name = "target"
    runner.attn_backend = create_backend(
        backend, BackendContext(runner.memory.req_to_token_pool, runner.kv_cache, 2, 1, 16)
    )
    return runner


@pytest.mark.parametrize("backend", ["triton", "flashinfer"])
def test_eager_idle_verify_reads_kv_indptr_graph_and_fix_do_not(backend):
    runner = _runner(backend)
    fb = runner.idle_batch(idle_verify_input("eagle-verify", 2, 3, 4))
    assert fb.batch_size == 1 and fb.is_padded_idle
    with pytest.raises(AttributeError, match=MESSAGE):
        runner.attn_backend.init_forward_metadata(fb)
    graph = runner.idle_batch(idle_verify_input("eagle-verify", 2, 3, 4))
    runner.graph_idle_metadata(graph)
    fixed = runner.idle_batch(idle_verify_input("eagle-verify-fixed", 2, 3, 4))
    assert fixed.spec_info.kv_indptr is None
    runner.attn_backend.init_forward_metadata(fixed)
    want = seq_lens_kv_metadata(runner.memory.req_to_token_pool.req_to_token, fixed.req_pool_indices, fixed.seq_lens)
    for md in (graph.attn_metadata, fixed.attn_metadata):
        assert md is not None and torch.equal(md.kv_indptr, want[0])


def test_the_parameters_are_validated():
    with pytest.raises(ConfigError, match="invalid verify_idle_input 'v3'; valid: eagle-verify, eagle-verify-fixed"):
        RunConfig(verify_idle_input="v3").validate()
    with pytest.raises(ConfigError, match="invalid idle_verify 'cuda-graph'; valid: graph, eager"):
        RunConfig(idle_verify="cuda-graph").validate()


def test_an_eager_idle_verify_crashes_the_idle_rank_even_on_the_fixed_revision():
    res = reproduce(
        backend="triton",
        revision="pr-28221",
        dp=2,
        dp_policy="pack",
        prompts=["def fib(n):\n    "],
        steps=3,
        topk=2,
        draft_tokens=4,
        max_new_tokens=8,
        idle_verify="eager",
        model_dir=os.environ.get("WB_MODEL_DIR"),
        timeout_s=240,
    )
    assert res.status == "crashed", res.summary()
    c = res.crash
    assert (c.rank, c.phase, c.forward_mode, c.batch_size, c.message) == (
        1,
        "verify",
        "IDLE",
        1,
        MESSAGE,
    )
    assert c.raised_at["file"].endswith("workbench/backends/triton.py") and "kv_indptr" in c.raised_at["code"]
