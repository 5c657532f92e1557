"""The real runtime without sglang: its shims (what they may touch), the live guard, the fixes
on a stand-in dataclass, argument refusals before anything starts, the CLI's exit codes, the run
record built from rank reports, and the launcher ending every rank process (fake ranks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from upstream_fixtures import in_release, runtime_config

from workbench.run.serialise import RecordError, from_dict, to_dict
from workbench.upstream.in_release import shims
from workbench.upstream.runtime import release_launch, release_record, shim_guard
from workbench.upstream.runtime.fixes import FIXES
from workbench.upstream.runtime.rank_result import RankResult, read_rank_result
from workbench.upstream.runtime.release_run import RuntimeConfigError, validate

RUNTIME = Path(release_launch.__file__).resolve().parent


SHIPPED = json.loads((RUNTIME.parents[1] / "assets" / "runtime_runs.json").read_text())["runs"]
TRACEBACK_MODULES = shim_guard.traceback_modules(SHIPPED.values())


def _protected_prefix(dotted: str) -> str | None:
    parts = dotted.split(".")  # the longest proper prefix: the module holding the target
    return next(
        (
            ".".join(parts[:i])
            for i in range(len(parts) - 1, 0, -1)
            if shim_guard.protected(".".join(parts[:i]), TRACEBACK_MODULES) or ".".join(parts[:i]) in shim_guard.EXEMPT
        ),
        None,
    )


def test_shim_targets_in_protected_code_are_only_in_exempt_modules() -> None:
    """A declared target inside a protected module is allowed only in a module exempt by name, with its reason."""
    touched = set()
    for shim in shims.SHIMS:
        for target in shim.targets:
            module = _protected_prefix(target)
            if module is not None:
                assert module in shim_guard.EXEMPT, f"shim {shim.name} touches protected {target}"
                assert shim.name in shim_guard.EXEMPT[module], (shim.name, module)
                touched.add(module)
    assert touched == set(shim_guard.EXEMPT), "an exemption no shim needs"


@pytest.mark.parametrize("key", sorted(SHIPPED))
def test_protected_set_covers_every_shipped_traceback(key: str) -> None:
    """Every sglang module on a shipped record's crash tracebacks (the crashing rank's and the peers')
    is held by the guard: derived from the records, not listed by hand."""
    rec = SHIPPED[key]
    tbs = [(rec.get("crash") or {}).get("traceback") or ""] + [f["traceback"] for f in rec["rank_failures"]]
    on_traceback = {m.replace("/", ".") for tb in tbs for m in re.findall(r'File "[^"]*?/(sglang/[^"]+?)\.py"', tb)}
    assert (rec["status"] == "crashed") == bool(on_traceback), key
    for module in on_traceback:
        assert shim_guard.protected(module, TRACEBACK_MODULES) or module in shim_guard.EXEMPT, (key, module)


def test_the_modules_the_old_hand_list_missed_are_protected() -> None:
    for module in (
        "sglang.srt.managers.tp_worker",
        "sglang.srt.speculative.eagle_utils",
        "sglang.srt.speculative.triton_ops.cache_locs",
        "sglang.srt.speculative.frozen_kv_mtp_worker_v2",
        "sglang.kernels.ops.speculative.spec_tree",
        "sglang.srt.utils.nvtx_utils",  # on 0.5.14's verify-crash traceback (a decorator of run_batch)
    ):
        assert shim_guard.protected(module, TRACEBACK_MODULES), module
    assert not shim_guard.protected("sglang.srt.utils.hf_transformers_utils", TRACEBACK_MODULES)


@pytest.mark.parametrize(
    "target",
    [
        "sglang.srt.speculative.eagle_info.EagleVerifyInput",
        "sglang.srt.speculative.eagle_info_v2.EagleDraftInputV2Mixin.prepare_for_decode",
        "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.init_forward_metadata",
        "sglang.srt.model_executor.forward_batch_info.ForwardBatch._pad_inputs_to_size",
        "sglang.srt.model_executor.forward_batch_info.ForwardBatch.prepare_mlp_sync_batch",
        "sglang.srt.layers.dp_attention.dp_gather_replicate",
        "sglang.srt.model_executor.model_runner.ModelRunner.forward_idle",
        "sglang.srt.model_executor.runner.eager_runner.EagerRunner._execute_idle",
        "sglang.srt.managers.scheduler.Scheduler.run_batch",
        "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker",
        "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.verify",
        "sglang.srt.speculative.eagle_worker.EAGLEWorker.forward_draft_extend_after_decode",
    ],
)
def test_the_protected_areas_are_recognised(target: str) -> None:
    assert _protected_prefix(target) is not None


def test_every_shim_names_its_upstream_line_reason_and_sglang_version() -> None:
    names = [s.name for s in shims.SHIMS]
    assert len(names) == len(set(names))
    for shim in shims.SHIMS:
        rel, fragment = shim.anchor
        assert rel.startswith(("srt/", "kernels/")) and rel.endswith(".py") and fragment, shim.name
        assert len(shim.why) > 40, shim.name
        reroutes_sglang = any(t.startswith("sglang.") for t in shim.targets) and not shim.name.startswith("tree-build")
        if reroutes_sglang:  # a rerouted CUDA-only op runs SGLang's own version
            assert shim.uses and ("sglang" in shim.uses or "the same module" in shim.uses or "own" in shim.uses)
    tree = [s for s in shims.SHIMS if s.name.startswith("tree-")]
    assert tree and all("spec_tree.py" in s.uses for s in tree)


def test_shim_lines_are_found_in_a_release_tree(tmp_path: Path) -> None:
    pkg = tmp_path / "sglang" / "srt" / "models"
    pkg.mkdir(parents=True)
    (pkg / "llama.py").write_text("x = 1\n        torch.cuda.synchronize()\n")
    shim = next(s for s in shims.SHIMS if s.name == "cuda-synchronize")
    assert shim.lines(str(tmp_path / "sglang")) == ["sglang/srt/models/llama.py:2"]
    other = next(s for s in shims.SHIMS if s.name == "record-stream-cpu")
    assert other.lines(str(tmp_path / "sglang")) == []


GUARD_SCRIPT = """
import sys
{boot}from wb_upstream.runtime import shim_guard
from sglang.srt.model_executor import forward_batch_info as fbi
from sglang.srt.speculative import eagle_info
before = shim_guard.check()
if {replace}:
    import helper
    fbi.ForwardBatch._pad_inputs_to_size = helper.pad
    eagle_info.make = helper.pad
print(repr((before, shim_guard.check())))
"""


def _fake_sglang(root: Path) -> None:
    for sub in ("sglang", "sglang/srt", "sglang/srt/model_executor", "sglang/srt/speculative"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "__init__.py").write_text("")
    (root / "sglang/srt/model_executor/forward_batch_info.py").write_text(
        "class ForwardBatch:\n    def _pad_inputs_to_size(self, runner, n, bs):\n        return n\n"
    )
    (root / "sglang/srt/speculative/eagle_info.py").write_text("def make():\n    return 1\n")
    (root / "helper.py").write_text("def pad(*a):\n    return 0\n")


@pytest.mark.parametrize("replace", [False, True])
def test_guard_flags_code_replaced_from_elsewhere(tmp_path: Path, replace: bool) -> None:
    _fake_sglang(tmp_path)
    script = GUARD_SCRIPT.format(boot=in_release(str(tmp_path)), replace=replace)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    before, after = eval(out.stdout)  # noqa: S307 - our own repr of plain dicts
    assert before["functions"] == 2 and before["violations"] == []
    assert "sglang.srt.speculative.eagle_info" in before["module_names"]
    if replace:
        assert {v["name"] for v in after["violations"]} == {"ForwardBatch._pad_inputs_to_size", "make"}
        assert all("helper.py" in v["detail"] for v in after["violations"])
    else:
        assert after["violations"] == []


FIX_SCRIPT = """
import sys, dataclasses
{boot}from wb_upstream.runtime import fixes
from sglang.srt.speculative.eagle_info import EagleVerifyInput, EagleDraftExtendInput
out = fixes.apply({names!r})
v = EagleVerifyInput(draft_token=[1])
print(repr((out, [f.name for f in dataclasses.fields(EagleVerifyInput)], getattr(v, "kv_indptr", "missing"),
            hasattr(EagleDraftExtendInput(1), "kv_indptr"), repr(v))))
"""


def test_fixes_add_the_optional_field_in_place(tmp_path: Path) -> None:
    _fake_sglang(tmp_path)
    (tmp_path / "sglang/srt/speculative/eagle_info.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            @dataclass
            class EagleVerifyInput:
                draft_token: list
                topk: int = 1
            @dataclass
            class EagleDraftExtendInput:
                hidden_states: object
                kv_indptr: object = None
            """
        )
    )
    script = FIX_SCRIPT.format(boot=in_release(str(tmp_path)), names=["verify-input", "pr-28221"])
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    applied, fields, value, extend_has, text = eval(out.stdout)  # noqa: S307
    assert fields == ["draft_token", "topk", "kv_indptr"] and value is None and "kv_indptr=None" in text
    assert [a["applied"] for a in applied] == [True, False] and extend_has
    assert applied[1]["note"] == "the release already declares the field"
    bad = FIX_SCRIPT.format(boot=in_release(str(tmp_path)), names=["nope"])
    res = subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True)
    assert res.returncode != 0 and "unknown fix ['nope']" in res.stderr and "verify-input" in res.stderr


FALLBACK_BACKEND = """
class TritonAttnBackend:
    def init_forward_metadata(self, forward_batch):
        spec_info = forward_batch.spec_info
        if forward_batch.forward_mode.is_decode_or_idle():
            if {test}:
                return "seq_lens"
            else:
                return spec_info.kv_indptr.shape
        return "other"
"""

FALLBACK_SCRIPT = """
import sys
{boot}from wb_upstream.runtime import fixes, shim_guard
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

class Mode:
    def __init__(self, decode): self.decode = decode
    def is_decode_or_idle(self): return self.decode

class Batch:
    def __init__(self, spec, decode=True): self.spec_info, self.forward_mode = spec, Mode(decode)

class WithNone:
    kv_indptr = None

class Without:
    pass

def call(batch):
    try:
        return TritonAttnBackend().init_forward_metadata(batch)
    except AttributeError as exc:
        tb = exc.__traceback__
        while tb.tb_next: tb = tb.tb_next
        return (str(exc), tb.tb_frame.f_code.co_filename.rsplit("/", 1)[-1])

before = call(Batch(WithNone()))
out = fixes.apply(["triton-idle-fallback"])
keep = Batch(WithNone())
got = [call(Batch(None)), call(keep), type(keep.spec_info).__name__, call(Batch(WithNone(), decode=False)),
       call(Batch(Without()))]
print(repr((before, out, got, shim_guard.check(fixes.changes(out)), shim_guard.check())))
"""


@pytest.mark.parametrize("has_fallback", [False, True])
def test_triton_idle_fallback_takes_the_releases_seq_lens_branch(tmp_path: Path, has_fallback: bool) -> None:
    """The backport sets a None kv_indptr aside on decode/idle batches only (and puts it back); a spec
    input without the attribute still raises in the release's own line; a release that has the
    fallback is left alone; the live guard lists the wrapped method under the fix the run asked for,
    and as a violation when no fix asked for it."""
    _fake_sglang(tmp_path)
    (tmp_path / "sglang/srt/layers/attention").mkdir(parents=True)
    for sub in ("sglang/srt/layers", "sglang/srt/layers/attention"):
        (tmp_path / sub / "__init__.py").write_text("")
    test = "spec_info is None or spec_info.kv_indptr is None" if has_fallback else "spec_info is None"
    (tmp_path / "sglang/srt/layers/attention/triton_backend.py").write_text(FALLBACK_BACKEND.format(test=test))
    script = FALLBACK_SCRIPT.format(boot=in_release(str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, applied, got, guard_fixed, guard_plain = eval(out.stdout)  # noqa: S307 - our own repr
    missing = ("'Without' object has no attribute 'kv_indptr'", "triton_backend.py")
    assert got == ["seq_lens", "seq_lens", "WithNone", "other", missing]
    assert applied[0]["fix"] == "triton-idle-fallback" and applied[0]["applied"] is (not has_fallback)
    name = "TritonAttnBackend.init_forward_metadata"
    if has_fallback:
        assert before == "seq_lens" and applied[0]["note"] == "the release already has the fallback"
        assert guard_fixed["violations"] == guard_plain["violations"] == [] and guard_fixed["fixed"] == []
    else:
        assert before == ("'NoneType' object has no attribute 'shape'", "triton_backend.py")
        assert guard_fixed["violations"] == [] and [f["name"] for f in guard_fixed["fixed"]] == [name]
        assert guard_fixed["fixed"][0]["fix"] == "triton-idle-fallback"
        assert [v["name"] for v in guard_plain["violations"]] == [name]
        assert "fixes.py" in guard_plain["violations"][0]["detail"]


FILL_VALUE_BACKEND = """
class AttentionBackend:
    def get_cuda_graph_seq_len_fill_value(self):
        raise NotImplementedError()

class TorchNativeAttnBackend(AttentionBackend):
    pass
"""

FILL_VALUE_SCRIPT = """
{boot}from wb_upstream.runtime import fixes, shim_guard
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

try:
    before = TorchNativeAttnBackend().get_cuda_graph_seq_len_fill_value()
except NotImplementedError:
    before = "NotImplementedError"
out = fixes.apply(["torch-native-fill-value"])
again = fixes.apply(["torch-native-fill-value"])
got = TorchNativeAttnBackend().get_cuda_graph_seq_len_fill_value()
print(repr((before, out, again, got, shim_guard.check(fixes.changes(out)), shim_guard.check())))
"""


def test_torch_native_fill_value_fix_defines_the_method_and_the_guard_lists_it(tmp_path: Path) -> None:
    """The fix for DP attention on torch_native: the inherited ``raise`` becomes 1 (the triton backend's value);
    applied once, listed under the fix by the live guard, and a violation when no fix asked for it."""
    _fake_sglang(tmp_path)
    (tmp_path / "sglang/srt/layers/attention").mkdir(parents=True)
    for sub in ("sglang/srt/layers", "sglang/srt/layers/attention"):
        (tmp_path / sub / "__init__.py").write_text("")
    (tmp_path / "sglang/srt/layers/attention/torch_native_backend.py").write_text(FILL_VALUE_BACKEND)
    script = FILL_VALUE_SCRIPT.format(boot=in_release(str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, applied, again, got, guard_fixed, guard_plain = eval(out.stdout)  # noqa: S307 - our own repr
    assert (before, got) == ("NotImplementedError", 1)
    assert applied[0]["applied"] is True and again[0]["applied"] is False
    name = "TorchNativeAttnBackend.get_cuda_graph_seq_len_fill_value"
    assert guard_fixed["violations"] == [] and [f["name"] for f in guard_fixed["fixed"]] == [name]
    assert [(v["name"], v["kind"]) for v in guard_plain["violations"]] == [(name, "attribute not in the source")]


LLAMA_MODEL = """
import torch

GATHERS = []  # the stand-in's DP-attention collectives, one entry per call


class LlamaAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_proj = torch.nn.Linear(4, 4)

    def forward(self, positions, hidden_states, forward_batch):
        q = self.qkv_proj(hidden_states)
        return q.view(q.shape[0], -1, 2).flatten(1)  # the rotary's view: ambiguous for 0 rows


class LlamaDecoderLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = LlamaAttention()

    def forward(self, positions, hidden_states, forward_batch, capture_output=None):
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states, forward_batch=forward_batch)
        GATHERS.append(hidden_states.shape[0])  # the stage boundary's gather, which every rank must join
        return hidden_states
"""

EAGLE_DRAFT_MODEL = """
import types

import torch


def add_prefix(name, prefix):
    return f"{prefix}.{name}" if prefix else name


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, num_embeddings, embedding_dim, use_attn_tp_group=False, prefix=""):
        super().__init__()
        self.use_attn_tp_group, self.prefix = use_attn_tp_group, prefix


class LlamaModel(torch.nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(
            config.vocab_size, config.hidden_size, prefix=add_prefix("embed_tokens", prefix)
        )
"""

EAGLE_IDLE_SCRIPT = """
{boot}import types, torch
from wb_upstream.runtime import fixes
from sglang.srt.layers import dp_attention
from sglang.srt.models import llama, llama_eagle

config = types.SimpleNamespace(vocab_size=5, hidden_size=4)
def embedding(dp):
    dp_attention.ENABLED = dp
    e = llama_eagle.LlamaModel(config, prefix="model").embed_tokens
    return (e.use_attn_tp_group, e.prefix)
embedding_before = embedding(True)

layer = llama.LlamaDecoderLayer()
def run(n):
    try:
        return tuple(layer(None, torch.zeros(n, 4), None).shape)
    except RuntimeError as exc:
        return type(exc).__name__
before = [run(0), run(3)]
gathers_before = list(llama.GATHERS)
out = fixes.apply(["eagle-idle-batch"])
again = fixes.apply(["eagle-idle-batch"])
after = [run(0), run(3)]
embeddings = [embedding_before, embedding(True), embedding(False)]
gathers = llama.GATHERS[len(gathers_before):]
print(repr((before, gathers_before, out, again, after, gathers, fixes.changes(out), embeddings)))
"""


def test_eagle_idle_batch_fix_skips_the_attention_of_an_empty_batch_only(tmp_path: Path) -> None:
    """The EAGLE-1 draft's empty idle batch stops at the Llama attention's view with 0 rows; the fix skips the
    attention for it (as Qwen3's decoder layer does) so the layer's collective still runs on the idle rank, and
    leaves a non-empty batch to the release; under DP attention (only) the draft's embedding is built on the
    attention-TP group, as Qwen2Model's is; applied once, each change listed for the guard."""
    _fake_sglang(tmp_path)
    for sub in ("sglang/srt/models", "sglang/srt/layers"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub / "__init__.py").write_text("")
    (tmp_path / "sglang/srt/models/llama.py").write_text(LLAMA_MODEL)
    (tmp_path / "sglang/srt/models/llama_eagle.py").write_text(EAGLE_DRAFT_MODEL)
    (tmp_path / "sglang/srt/layers/dp_attention.py").write_text(
        "ENABLED = False\n\n\ndef is_dp_attention_enabled():\n    return ENABLED\n"
    )
    script = EAGLE_IDLE_SCRIPT.format(boot=in_release(str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, gathers_before, applied, again, after, gathers_after, changes, embeddings = eval(out.stdout)  # noqa: S307
    assert before == ["RuntimeError", (3, 4)] and gathers_before == [3]
    assert applied[0]["applied"] is True and again[0]["applied"] is False
    assert after == [(0, 4), (3, 4)] and gathers_after == [0, 3]
    assert embeddings == [(False, "model.embed_tokens"), (True, "model.embed_tokens"), (False, "model.embed_tokens")]
    assert [(c["module"], c["name"]) for c in changes] == [
        ("sglang.srt.models.llama", "LlamaAttention.forward"),
        ("sglang.srt.models.llama_eagle", "LlamaModel.__init__"),
    ]


def test_appended_runs_keep_their_own_provenance() -> None:
    """--append: each part keeps the date and commit of the runs it wrote; a run measured again moves
    to the new part; notebook 06's label reads the part that measured the runs it shows."""
    from workbench.upstream.runtime.measurements import part_of
    from workbench.upstream.runtime.suite import provenance

    first = {"generated_at": "d1", "command": "c1", "commit": "aaa", "host": "h"}
    one = provenance(first, ["0.5.14/triton/dp2", "0.5.14/triton/dp1"], {**first, "runs": ["0.5.14/triton/dp1"]})
    assert one["commit"] == "aaa" and [p["runs"] for p in one["parts"]] == [
        ["0.5.14/triton/dp2"],
        ["0.5.14/triton/dp1"],
    ]
    part = {"generated_at": "d2", "command": "c2", "commit": "bbb", "host": "h", "runs": ["0.5.12/triton/v1-dp2"]}
    two = provenance(one, ["0.5.14/triton/dp2", "0.5.14/triton/dp1"], part)
    assert two["commit"] == "aaa, bbb" and two["command"] == "c1; c1; c2" and two["generated_at"] == "d2"
    assert part_of(two, "0.5.12/triton/v1-dp2")["commit"] == "bbb"
    assert part_of(two, "0.5.14/triton/dp2")["commit"] == "aaa"
    again = provenance(two, [], {**part, "runs": ["0.5.14/triton/dp2"], "commit": "ccc"})
    assert part_of(again, "0.5.14/triton/dp2")["commit"] == "ccc"
    assert [p["runs"] for p in again["parts"]][0] == ["0.5.14/triton/dp1"]
    assert part_of({"commit": "old"}, "x")["commit"] == "old"  # a file written in one go


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"dp": 4}, ["bad dp 4", "1, 2, 3"]),
        ({"backend": "flashinfer"}, ["bad backend 'flashinfer'", "triton, torch_native"]),
        ({"fixes": ["pr-99"]}, ["bad fix", "pr-99", "verify-input, pr-28221"]),
        ({"fixes": ["pr-28221", "pr-28221"]}, ["bad fix", "at most once"]),
        ({"draft_tokens": 3}, ["bad draft_tokens 3 for topk 1", "steps + 1 = 4"]),
        ({"topk": 2, "draft_tokens": 8}, ["bad draft_tokens 8", "2..7"]),
        ({"num_prompts": 0}, ["bad num_prompts 0", "1..20"]),
        ({"extra_shims": [Path("no-such-probe.py")]}, ["bad extra shim 'no-such-probe.py'", "install()"]),
        ({"algorithm": "MEDUSA"}, ["bad speculative algorithm 'MEDUSA'", "EAGLE3, EAGLE, STANDALONE, NGRAM"]),
        ({"idle": "late"}, ["bad idle 'late'", "start, mid"]),
        ({"idle": "mid", "dp": 1}, ["bad idle 'mid' at dp 1"]),
        ({"idle": "mid", "max_new_tokens": 2}, ["bad max_new_tokens 2 with idle mid"]),
        ({"dp": 4}, ["bad dp 4", "1, 2, 3"]),
    ],
)
def test_bad_arguments_are_named_before_anything_starts(kwargs: dict, words: list[str]) -> None:
    args = dict(
        version="0.5.14",
        dp=2,
        backend="triton",
        fixes=[],
        steps=3,
        topk=1,
        draft_tokens=4,
        num_prompts=1,
        max_new_tokens=8,
        sglang_src=None,
        known=None,
    )
    args.update(kwargs)
    with pytest.raises(RuntimeConfigError) as err:
        validate(**args)
    for w in words:
        assert w in str(err.value)
    assert set(FIXES) == {
        "verify-input",
        "pr-28221",
        "triton-idle-fallback",
        "torch-native-fill-value",
        "eagle-idle-batch",
        "llama-attn-tp",
    }


def test_each_algorithm_gets_its_draft() -> None:
    """EAGLE3 and EAGLE load their heads, STANDALONE an ordinary smaller Qwen3, NGRAM no draft model
    (its breadth through SGLang's own ngram argument); every named draft folder is shipped."""
    from workbench.upstream.runtime.release_run import ALGORITHMS, DRAFT_MODEL, MODELS, speculative_args

    args = {a: speculative_args(a, 3, 1, 4) for a in ALGORITHMS}
    assert args["EAGLE3"]["speculative_draft_model_path"] == str(MODELS / "draft")
    assert args["EAGLE"]["speculative_draft_model_path"] == str(MODELS / "eagle_draft")
    assert args["STANDALONE"]["speculative_draft_model_path"] == str(MODELS / "standalone_draft")
    standalone = json.loads((MODELS / "standalone_draft" / "config.json").read_text())
    assert standalone["architectures"] == ["Qwen3ForCausalLM"] and standalone["num_hidden_layers"] == 2
    assert args["NGRAM"] == {
        "speculative_algorithm": "NGRAM",
        "speculative_num_draft_tokens": 4,
        "speculative_ngram_max_bfs_breadth": 1,
    }
    assert all(args[a]["speculative_algorithm"] == a for a in ALGORITHMS)
    eagle = json.loads((MODELS / "eagle_draft" / "config.json").read_text())
    assert eagle["architectures"] == ["LlamaForCausalLMEagle"]
    for folder in filter(None, DRAFT_MODEL.values()):
        assert (MODELS / folder / "model.safetensors").is_file()


def _frames(*names: str) -> list[dict]:
    return [
        {"file": f"/x/sglang/srt/{n.split(':')[0]}", "line": 1, "function": n.split(":")[1], "code": ""} for n in names
    ]


def _shipped_records() -> dict[str, dict]:
    explore = json.loads((RUNTIME.parents[1] / "assets" / "runtime_explore.json").read_text())
    cells = {f"explore/{c['key']}": c["record"] for c in explore["cells"] if c.get("record")}
    return {**SHIPPED, **cells}


def _kept(old: object, new: object) -> bool:
    """``new`` holds every key and value of ``old`` (it may add fields the record class defaults)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and _kept(v, new[k]) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(old) == len(new) and all(map(_kept, old, new))
    return old == new


def test_every_shipped_runtime_record_reads_strictly_and_keeps_its_fields() -> None:
    """Every shipped real-runtime record (the suite's runs and the exploration's cells) fits
    ``RuntimeRecord`` with no unknown key or wrong type, and writing it back loses nothing."""
    recs = _shipped_records()
    assert len(recs) > len(SHIPPED)  # the exploration's cells were read too
    for key, rec in recs.items():
        assert _kept(rec, to_dict(from_dict(release_record.RuntimeRecord, rec))), key


def test_a_record_with_an_unknown_or_mistyped_field_is_refused() -> None:
    rec = to_dict(_new("triton", 2, 60))
    assert from_dict(release_record.RuntimeRecord, rec) == _new("triton", 2, 60)
    with pytest.raises(RecordError, match=r"RuntimeRecord: unknown key\(s\) \['outcome'\]"):
        from_dict(release_record.RuntimeRecord, {**rec, "outcome": "ok"})
    with pytest.raises(RecordError, match=r"RuntimeRecord.config.dp: expected int, got '2'"):
        from_dict(release_record.RuntimeRecord, {**rec, "config": {**rec["config"], "dp": "2"}})


def _new(backend: str, dp: int, timeout_s: float) -> release_record.RuntimeRecord:
    """An empty record of a real-runtime run's whole configuration (``run_runtime``'s defaults)."""
    cfg = runtime_config(
        dp=dp, backend=backend, timeout_s=timeout_s, extra_shims=[], bundle_dir="bundles", idle="start"
    )
    return release_record.new(cfg)


def _ranks(reports: dict[int, dict], **kw) -> release_launch.RankRun:
    """A ``RankRun`` of rank reports as ``release_rank.py`` writes them, each read strictly."""
    return release_launch.RankRun(results={r: from_dict(RankResult, d) for r, d in reports.items()}, **kw)


def test_a_rank_report_reads_as_a_rank_result_and_a_bad_one_fails_the_run_closed() -> None:
    """A report is read into ``RankResult``; one with an unknown key, a bad status or a crash without its
    exception is an ``error`` report naming why, which makes the run's status error."""
    ok = read_rank_result({"status": "ok", "rank": 0, "outputs": {"p0": [1, 2]}, "spec": {}}, 0)
    assert (ok.status, ok.outputs, ok.shim_guard) == ("ok", {"p0": [1, 2]}, None)
    for bad, why in (
        ({"status": "done", "rank": 1}, "RankResult.status: invalid value 'done'; valid: 'ok', 'crashed', 'error'"),
        ({"status": "ok", "rank": 1, "outcome": "ok"}, "RankResult: unknown key(s) ['outcome']"),
        ({"status": "crashed", "rank": 1}, "status 'crashed' needs exception and message"),
    ):
        got = read_rank_result(bad, 1)
        assert (got.status, got.stage, got.exception) == ("error", "rank result", "RecordError"), bad
        assert got.message.startswith("rank 1 wrote a report that is not a RankResult: ") and why in got.message
    rec = _new("triton", 1, 60)
    ranks = release_launch.RankRun(results={0: read_rank_result({"status": "done", "rank": 0}, 0)}, ended_by="error")
    release_record.fill(rec, ranks, [[1]])
    assert rec.status == "error" and rec.error.stage == "rank result" and "'done'" in rec.error.message


def test_record_from_rank_reports() -> None:
    crashed = {
        "status": "crashed",
        "rank": 1,
        "exception": "AttributeError",
        "time": 2.0,
        "message": "'EagleVerifyInput' object has no attribute 'kv_indptr'",
        "traceback": "Traceback ...",
        "frames": _frames(
            "speculative/eagle_worker_v2.py:verify", "layers/attention/triton_backend.py:init_forward_metadata"
        ),
        "batch": {"forward_mode": "IDLE", "batch_size": 1, "spec_info": "EagleVerifyInput"},
        "shims": [{"name": "x"}],
        "fixes": [],
        "shim_guard": {"violations": []},
    }
    peer = {
        **crashed,
        "rank": 0,
        "time": 3.0,
        "exception": "RuntimeError",
        "message": "Connection closed by peer",
        "frames": _frames("speculative/eagle_worker_v2.py:verify"),
    }
    rec = _new("triton", 2, 60)
    release_record.fill(rec, _ranks({0: peer, 1: crashed}, ended_by="crashed", exit_codes={0: -15, 1: 3}), [[1]])
    c = rec.crash
    assert rec.status == "crashed" and (c.rank, c.phase, c.forward_mode, c.batch_size) == (
        1,
        "verify",
        "IDLE",
        1,
    )
    assert c.raised_at["file"] == "sglang/srt/layers/attention/triton_backend.py" and c.spec_info == "EagleVerifyInput"
    assert [f.rank for f in rec.rank_failures] == [0] and rec.shims == [{"name": "x"}]
    done = {
        "status": "ok",
        "rank": 0,
        "outputs": {"p0": [72, 105], "p1": [33]},
        "spec": {"p0": {"spec_verify_ct": 2, "spec_num_correct_drafts": 3}},
        "timings": {"generate_s": 1.5},
        "shims": [{"name": "x"}],
        "shim_guard": {"violations": [], "after_run": {"violations": []}},
    }
    ok = _new("torch_native", 1, 60)
    release_record.fill(ok, _ranks({0: done}, ended_by="ok"), [[1], [2]])
    assert ok.status == "ok" and ok.outputs == [[72, 105], [33]] and ok.outputs_text == ["Hi", "!"]
    assert ok.metrics["accept_length_mean"] == 2.5 and ok.outputs_sha256
    release_record.check_reference(
        ok, {"outputs": [[72, 104], [33]], "transformers": "5", "architecture": "Qwen3ForCausalLM"}
    )
    assert ok.reference.equal is False and ok.reference.first_difference == {"prompt": 0, "position": 1}
    late = _new("triton", 2, 5)
    release_record.fill(late, release_launch.RankRun(ended_by="timeout"), [[1]])
    assert late.status == "timeout" and "5 s" in late.error.message
    assert (
        release_record.phase_of(_frames("speculative/eagle_worker_v2.py:_draft_extend_for_decode"), "IDLE")
        == "draft-extend"
    )
    prefill = _frames("speculative/eagle_worker_v2.py:forward_batch_generation", "managers/tp_worker.py:forward")
    prefill[0]["code"] = "batch_output = self.target_worker.forward_batch_generation(batch)"
    assert release_record.phase_of(prefill, "IDLE") == "prefill"


def test_a_guard_violation_or_an_unheld_rank_ends_the_run_with_status_error() -> None:
    """A violation in any rank, after set-up or after the run, makes an ok (or crashed) run an error that
    names the class and attribute; a completed run where a rank did not hold the guard after it fails closed."""
    held = {"violations": [], "after_run": {"violations": []}}
    seen = {"module": "sglang.srt.speculative.eagle_info", "name": "EagleDraftExtendInput.kv_indptr"}
    hidden = {**held, "after_run": {"violations": [{**seen, "kind": "attribute not in the source", "detail": ""}]}}
    done = {"status": "ok", "rank": 0, "outputs": {"p0": [1]}, "spec": {}, "timings": {}, "shim_guard": held}
    idle = {"status": "ok", "rank": 1, "outputs": {}, "spec": {}, "timings": {}}
    for rank1, status in ((held, "ok"), (hidden, "error"), (None, "error")):
        rec = _new("triton", 2, 60)
        results = {0: done, 1: {**idle, "shim_guard": rank1} if rank1 else idle}
        release_record.fill(rec, _ranks(results, ended_by="ok"), [[1]])
        assert rec.status == status, rank1
        if rank1 is hidden:
            v = rec.error.violations[0]
            assert (v["rank"], v["when"], v["name"]) == (1, "after the run", "EagleDraftExtendInput.kv_indptr")
            assert "EagleDraftExtendInput.kv_indptr" in rec.error.message and rec.error.stage == "shim-guard"
        elif rank1 is None:
            assert "not held after the run on rank(s) [1]" in rec.error.message
    crashed = {
        "status": "crashed",
        "rank": 1,
        "exception": "AttributeError",
        "message": "m",
        "traceback": "t",
        "frames": [],
        "batch": {},
        "shim_guard": hidden,
    }
    rec = _new("triton", 2, 60)
    release_record.fill(rec, _ranks({1: crashed}, ended_by="crashed"), [[1]])
    assert rec.status == "error" and rec.crash is None and rec.error.crash.message == "m"


FAKE_RANK = """#!{python}
import json, sys, time
cfg = json.load(open(sys.argv[-1]))  # the boot's last argument: the config
if cfg["rank"] == 1:
    time.sleep(0.5)
    json.dump({{"status": "crashed", "rank": 1, "exception": "AttributeError", "message": "m",
               "traceback": "t", "frames": [], "batch": {{}}, "time": time.time()}}, open(cfg["result_path"], "w"))
    sys.exit(3)
import subprocess
subprocess.Popen(["sleep", "300"])  # a child in the rank's group, as SGLang's resource tracker is
while True:
    time.sleep(1)                    # rank 0 blocks, as in a collective whose peer died
"""


def test_launcher_ends_every_rank_and_child(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(FAKE_RANK.format(python=sys.executable))
    fake.chmod(0o755)
    configs = [
        {"rank": r, "requests": [{"rid": "p0"}] if r == 0 else [], "result_path": str(tmp_path / f"r{r}.json")}
        for r in range(2)
    ]
    t0 = time.monotonic()
    out = release_launch.run_ranks(fake, configs, tmp_path, dict(os.environ), timeout_s=60)
    assert out.ended_by == "crashed" and out.results[1].status == "crashed" and 1 not in {0} - set(out.results)
    assert out.left_running == [] and time.monotonic() - t0 < 20
    assert out.exit_codes[1] == 3 and out.exit_codes[0] in (-15, -9)
    timed = release_launch.run_ranks(fake, configs[:1], tmp_path, dict(os.environ), timeout_s=1)
    assert timed.ended_by == "timeout" and timed.left_running == []


def test_thread_binding_splits_the_cores() -> None:
    binding = release_launch.thread_binding(2).split("|")
    assert len(binding) == 2 and release_launch.thread_binding(1).count("|") == 0


def test_cli_exit_codes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from workbench.cli import main as workbench_main
    from workbench.upstream.runtime import release_run as run_mod

    records = {
        "ok": {"status": "ok", "crash": None, "error": None, "reference": {"equal": True}},
        "differs": {"status": "ok", "crash": None, "error": None, "reference": {"equal": False}},
        "limited": {
            "status": "crashed",
            "crash": {"traceback": "T"},
            "error": None,
            "reference": None,
            "limits": ["the release cannot pad DP batches for this backend on a CPU"],
        },
        "crashed": {"status": "crashed", "crash": {"traceback": "T"}, "error": None, "reference": None},
        "error": {
            "status": "error",
            "crash": None,
            "error": {"stage": "install:torch", "message": "no"},
            "reference": None,
        },
    }
    for status, expect, code in (
        ("ok", None, 0),
        ("crashed", None, 0),
        ("crashed", "crashed", 0),
        ("ok", "crashed", 1),
        ("error", None, 2),
        ("error", "ok", 2),
        ("limited", None, 2),  # a known upstream limit (0.5.23 on CPU): exit 2, never a pass
        ("limited", "crashed", 2),
    ):
        rec = {**records[status], "timings": {}, "processes": {"left_running": []}}
        monkeypatch.setattr(run_mod, "run_runtime", lambda *a, _r=rec, **k: _r)
        argv = ["run", "--sglang", "0.5.14", "--json", str(tmp_path / "r.json")] + (
            ["--expect", expect] if expect else []
        )
        assert workbench_main(["upstream", *argv]) == code, (status, expect)
        assert json.loads((tmp_path / "r.json").read_text())["status"] == records[status]["status"]
    assert workbench_main(["upstream", "run", "--sglang", "0.5.14", "--dp", "4"]) == 2  # refused by argparse


def test_the_shipped_runs_end_as_the_notebook_expects_and_a_changed_one_is_named() -> None:
    """``measurements.problems`` over the shipped runs (what notebook 06 checks) finds nothing; a run that
    ended otherwise, or whose outputs differ from DP 1, is named."""
    from workbench.upstream.runtime import measurements

    runs = measurements.load_runs("0.5.14", "triton")["runs"]
    assert measurements.problems(runs, "triton") == []
    crashed = next(role for role, r in runs.items() if r["status"] == "crashed")
    frames = measurements.sglang_frames(runs[crashed])
    assert frames and all(f.startswith("sglang/") for f in frames)
    ok = next(role for role, r in runs.items() if r["status"] == "ok" and role != "dp1")
    changed = {**runs, crashed: {**runs[crashed], "status": "ok"}, ok: {**runs[ok], "outputs": [[0]]}}
    found = measurements.problems(changed, "triton")
    assert f"{crashed}: expected crashed, got ok" in found[0]
    assert f"{ok}: outputs differ from the DP 1 run (dp1)" in found


def test_the_other_algorithms_roles_are_judged_against_their_own_dp1() -> None:
    """The roles asked for by name (``eagle-dp1``, ``eagle-dp2``, ``standalone-dp1``) read as the shipped
    exploration's cells of those algorithms; an ok DP 2 run is compared with its own algorithm's DP 1."""
    from workbench.upstream.runtime import measurements, suite

    cells = {
        c["key"]: c["record"]
        for c in json.loads((RUNTIME.parents[1] / "assets" / "runtime_explore.json").read_text())["cells"]
    }
    runs = {
        "eagle-dp1": cells["EAGLE/triton/dp1/start/overlap-off"],
        "eagle-dp2": cells["EAGLE/triton/dp2/start/overlap-off"],
        "standalone-dp1": cells["STANDALONE/triton/dp1/start/overlap-off"],
    }
    assert {role: suite.ROLES[role].get("algorithm") for role in runs} == {
        "eagle-dp1": "EAGLE",
        "eagle-dp2": "EAGLE",
        "standalone-dp1": "STANDALONE",
    }
    assert "--speculative-algorithm EAGLE" in suite.command("0.5.23", "triton", suite.ROLES["eagle-dp2"])
    assert measurements.problems(runs, "triton") == []
    assert "eagle-dp2" not in measurements.default_roles("0.5.23", "triton")
    ok_elsewhere = {**runs["eagle-dp2"], "status": "ok", "crash": None, "outputs": [[0]]}
    found = measurements.problems({**runs, "eagle-dp2": ok_elsewhere}, "triton")
    assert found[0].startswith("eagle-dp2: expected crashed, got ok")
    assert "eagle-dp2: outputs differ from the DP 1 run (eagle-dp1)" in found
