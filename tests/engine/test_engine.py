"""Engine core: lossless EAGLE3 vs the target's greedy output, no leaked KV slots, scheduling,
validation and checkpoint errors. Uses the shipped models and prompts (WB_MODEL_DIR overrides)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from workbench.engine.schedule_batch import Req
from workbench.engine.scheduler import Scheduler
from workbench.engine.worker import GreedyWorker
from workbench.models.loader import CheckpointError, load_models
from workbench.models.tokenizer import EOS_ID, encode
from workbench.run.api import reproduce
from workbench.run.config import ConfigError

MODEL_DIR = os.environ.get("WB_MODEL_DIR")
NEW_TOKENS = 40
SPEC = [(1, 1, 2), (3, 1, 4), (7, 1, 8), (5, 4, 16), (6, 10, 32)]  # (7, 1, 8): the comparison's chain


@pytest.fixture(scope="module")
def greedy(prompts):
    res = reproduce(backend="torch_native", mode="greedy", max_new_tokens=NEW_TOKENS, model_dir=MODEL_DIR)
    assert res.status == "ok", res.summary()
    return res


@pytest.fixture(scope="module")
def eagle_runs(prompts):
    out = {}
    for steps, topk, n in SPEC:
        out[(steps, topk, n)] = reproduce(
            backend="torch_native",
            revision="pr-28221",
            steps=steps,
            topk=topk,
            draft_tokens=n,
            max_new_tokens=NEW_TOKENS,
            model_dir=MODEL_DIR,
        )
    return out


@pytest.mark.parametrize("spec", SPEC, ids=lambda s: "steps{}-topk{}-n{}".format(*s))
def test_eagle_is_lossless_and_leaks_no_slot(spec, eagle_runs, greedy, prompts):
    res = eagle_runs[spec]
    assert res.status == "ok", res.summary()
    for i in range(len(prompts)):
        assert res.record.outputs[i] == greedy.record.outputs[i], f"prompt {i} differs at {spec}"
        assert len(res.record.outputs[i]) == NEW_TOKENS or res.record.outputs[i][-1] == 256
    assert res.record.outputs_sha256 == greedy.record.outputs_sha256
    assert res.record.slots_leaked == 0
    m = res.metrics
    assert m["verify_steps"] == len(m["accept_length_per_step"]) > 0
    assert all(1 <= a <= spec[0] + 1 for a in m["accept_length_per_step"])
    assert set(m["latency_s"]) >= {"prefill", "draft", "verify", "draft-extend"}


def test_accept_length_on_shipped_models(eagle_runs):
    """The shipped head earns >= 3.0 tokens per verify step at (5, 4, 16) (SGLang CI asks >= 2.0 / 2.3)."""
    m = eagle_runs[(5, 4, 16)].metrics
    assert m["accept_length_mean"] >= 3.0, m["accept_length_mean"]
    assert 0 < m["acceptance_rate"] <= 1
    per_pos = m["acceptance_per_position"]
    assert len(per_pos) == 5 and per_pos[0] >= 0.6, per_pos  # the head's first draft token is mostly right
    assert per_pos[-1] < per_pos[0], per_pos  # a draft five tokens deep is not as good as one token deep


def cache_free_greedy(target, prompt: str, max_new_tokens: int) -> list:
    """Greedy decoding without any KV cache: the whole sequence through the target's plain causal
    forward (the training path, no ForwardBatch, no backend, no paged pool) for every new token."""
    ids = encode(prompt)
    out = []
    with torch.no_grad():
        while len(out) < max_new_tokens and (not out or out[-1] != EOS_ID):
            seq = torch.tensor([ids + out])
            hidden, _ = target(seq, torch.arange(seq.shape[1]).unsqueeze(0))
            out.append(int(target.logits(hidden[0, -1]).argmax()))
    return out


# Triton's decode step runs in the interpreter (about 0.8 CPU-s a step for the 3 prompts): it decodes 6 tokens
# (prefill and 5 decode steps through the pool), torch_native 16; the same code paths either way.
@pytest.mark.parametrize("backend,new_tokens", [("torch_native", 16), ("triton", 6)])
def test_paged_greedy_equals_the_cache_free_causal_forward(backend, new_tokens, prompts):
    """The lossless reference itself checked: the engine's paged greedy decode (prefill, then one
    token per step through the KV pool and the backend) equals argmax over a cache-free forward."""
    target, _ = load_models(MODEL_DIR)
    chosen = prompts[:3]
    res = reproduce(backend=backend, mode="greedy", prompts=chosen, max_new_tokens=new_tokens, model_dir=MODEL_DIR)
    assert res.status == "ok", res.summary()
    for i, prompt in enumerate(chosen):
        assert res.record.outputs[i] == cache_free_greedy(target, prompt, new_tokens), f"{backend} prompt {i}"


def test_loaded_linear_weights_are_column_major_with_the_checkpoints_values():
    """``inference_layout``: same values and shapes as the file, (in, out)-contiguous storage."""
    from safetensors.torch import load_file

    from workbench.models.loader import DEFAULT_MODEL_DIR

    target, draft = load_models(MODEL_DIR)
    root = MODEL_DIR or DEFAULT_MODEL_DIR
    for model, sub in ((target, "target"), (draft, "draft")):
        state = load_file(str(os.path.join(root, sub, "model.safetensors")))
        linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        assert linears
        for name, m in linears.items():
            w = m.weight
            assert w.stride() == (1, w.shape[0]) and w.t().is_contiguous(), name
            assert torch.equal(w, state[name + ".weight"]), name


def test_scheduler_admits_and_drops_requests_independently():
    """Three requests of different lengths through two batch slots: each equals its solo run."""
    target, _ = load_models(MODEL_DIR)
    texts = ["def add(a, b):\n", "import os\n", "class Point:\n"]
    lens = [5, 17, 9]

    def run(idx, max_running):
        w = GreedyWorker(target, "torch_native", max_running, 256)
        s = Scheduler(w, max_running)
        s.add([Req(i, encode(texts[i]), lens[i]) for i in idx])
        done = {r.rid: r.output_ids for r in s.run()}
        assert w.memory.allocator.available() == w.memory.allocator.capacity
        return done

    together = run([0, 1, 2], max_running=2)
    for i in range(3):
        assert together[i] == run([i], 1)[i]
        assert len(together[i]) == lens[i]


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"backend": "cuda_magic"}, "valid: torch_native, triton, flashinfer, fa3"),
        ({"revision": "v1"}, "valid: pre-24860, pr-24860, pr-28221"),
        ({"topk": 0}, "topk 0"),
        ({"steps": 0}, "steps 0"),
        ({"steps": 2, "topk": 2, "draft_tokens": 6}, "draft_tokens 6; valid: an integer in 2..steps*topk+1 = 5"),
        ({"dp": 0}, "dp 0"),
        ({"max_new_tokens": 0}, "max_new_tokens 0"),
        ({"prompts": ["ok", ""]}, "prompts[1] ''"),
        ({"prompts": []}, "prompts []"),
        ({"dp_policy": "random"}, "valid: balanced, pack"),
        ({"warp": 9}, "unknown run parameter(s) ['warp']"),
    ],
)
def test_bad_parameters_are_refused_with_the_value_and_choices(kw, needle):
    with pytest.raises(ConfigError) as e:
        reproduce(**kw)
    assert needle in str(e.value)


def test_checkpoint_errors_name_the_file_and_the_rebuild_command(tmp_path):
    with pytest.raises(CheckpointError, match=r"target checkpoint file .*config.json is missing.*train_models.py"):
        load_models(tmp_path)
    src_target, src_draft = load_models(MODEL_DIR)
    from workbench.models.loader import save_checkpoint

    save_checkpoint(src_target, src_target.config, tmp_path / "target")
    save_checkpoint(src_draft, src_draft.config, tmp_path / "draft")
    (tmp_path / "draft" / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"draft weights .*model.safetensors are corrupt.*train_models.py"):
        load_models(tmp_path)
    cfg = json.loads((tmp_path / "target" / "config.json").read_text())
    cfg["intermediate_size"] += 8
    (tmp_path / "target" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"target weights .* do not match .*config.json"):
        load_models(tmp_path)


def test_cli_run_writes_a_record(tmp_path):
    out = tmp_path / "rec.json"
    args = [
        sys.executable,
        "-m",
        "workbench",
        "run",
        "--backend",
        "torch_native",
        "--num-prompts",
        "2",
        "--max-new-tokens",
        "8",
        "--steps",
        "3",
        "--topk",
        "2",
        "--draft-tokens",
        "4",
        "--json",
        str(out),
    ]
    if MODEL_DIR:
        args += ["--model-dir", MODEL_DIR]
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rec = json.loads(out.read_text())
    assert rec["status"] == "ok" and rec["crash"] is None
    for key in (
        "backend",
        "kernel",
        "revision",
        "dp",
        "steps",
        "topk",
        "draft_tokens",
        "seed",
        "prompts",
        "max_new_tokens",
    ):
        assert key in rec["config"]
    for key in (
        "accept_length_mean",
        "acceptance_rate",
        "accept_length_per_step",
        "acceptance_per_position",
        "latency_s",
        "tokens_per_s",
    ):
        assert key in rec["metrics"]
    assert len(rec["outputs_sha256"]) == 64 and "torch" in rec["env"]
    bad = subprocess.run([sys.executable, "-m", "workbench", "run", "--topk", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid topk 0" in bad.stderr


ALL_BACKENDS_SPEC = dict(revision="pr-28221", steps=5, topk=4, draft_tokens=16, max_new_tokens=24)


@pytest.fixture(scope="module")
def greedy_24():
    """Plain greedy decoding, 24 new tokens: every backend's EAGLE3 output must equal it."""
    res = reproduce(backend="torch_native", mode="greedy", max_new_tokens=24, model_dir=MODEL_DIR)
    assert res.status == "ok", res.summary()
    return res


@pytest.fixture(scope="module")
def native_5_4_16():
    """torch_native's EAGLE3 run at (5, 4, 16): the draft fa3 and flashinfer must accept exactly as it does."""
    return reproduce(backend="torch_native", model_dir=MODEL_DIR, **ALL_BACKENDS_SPEC)


# Each backend is its own test. The Triton interpreter's run is most of this file's time (about 4/5):
# it is marked nightly (the nightly workflow's network shards run it; `make test` skips it, saying so).
# `make test` still checks the triton backend against greedy on fewer prompts and tokens
# (tests/run/test_dp.py: pr-28221 at dp 1 and 2) and its kernels against their torch references.
@pytest.mark.parametrize(
    "backend", [pytest.param("triton", marks=pytest.mark.nightly), "flashinfer", "fa3", "torch_native"]
)
def test_every_backend_gives_the_greedy_output_on_the_shipped_prompts(backend, greedy_24, request):
    """dp 1, (5, 4, 16): triton (Triton kernels), flashinfer and fa3 (their contracts; torch
    stand-in compute on CPU) and torch_native all equal plain greedy decoding, token for token.
    Losslessness holds whatever the draft proposes, so the draft itself is checked too: torch_native
    builds its draft-step layouts from the multi-step plan, fa3 and flashinfer rebuild theirs every
    step from req_to_token; on the same padded attention they must accept exactly the same drafts."""
    native = None if backend == "triton" else request.getfixturevalue("native_5_4_16")
    res = native if backend == "torch_native" else reproduce(backend=backend, model_dir=MODEL_DIR, **ALL_BACKENDS_SPEC)
    assert res.status == "ok", res.summary()
    assert res.record.outputs == greedy_24.record.outputs, backend
    assert res.record.slots_leaked == 0
    stand_in = backend in ("flashinfer", "fa3")
    assert res.record.config["kernel_stand_in"] == stand_in
    assert ("stand-in" in res.record.config["kernel"]) == stand_in
    if stand_in:
        assert native.status == "ok", native.summary()
        assert res.metrics["accept_length_per_step"] == native.metrics["accept_length_per_step"]
