"""Runner paths on a toy release: an install reaches the eager idle path, another input installed
first makes a finding unreachable, CUDA-graph-only use too; reachability read from the path."""

from __future__ import annotations

import textwrap

from upstream_fixtures import ATTN_DIR, MODES, MODES_FILE, SPEC_DIR

from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.lint import analyse

SPEC = textwrap.dedent("""
    class SpecInput:
        custom_mask = None
    class SpeculativeAlgorithm(IntEnum):
        EAGLE = auto()
        NGRAM = auto()
        def is_eagle(self):
            return self == SpeculativeAlgorithm.EAGLE
        def is_ngram(self):
            return self == SpeculativeAlgorithm.NGRAM
        def create_worker(self):
            if self.is_eagle():
                return EagleWorkerV2
            if self.is_ngram():
                return NgramWorker
    class VerifyInput(SpecInput):
        @classmethod
        def create_idle_input(cls):
            return cls()
    class GraphInput(SpecInput):
        pass
    class ReplacedInput(SpecInput):
        pass
""")

WORKER = textwrap.dedent("""
    class EagleWorkerV2:
        def __init__(self, model_runner: ModelRunner):
            self.model_runner = model_runner
        def draft(self, batch):
            return VerifyInput.create_idle_input()
        def forward_batch_generation(self, batch):
            verify_input = self.draft(batch)
            batch.spec_info = verify_input
            return self.verify(batch)
        def verify(self, batch):
            fb = ForwardBatch.init_new(batch, self.model_runner)
            return self.model_runner.forward(fb)
    class NgramWorker:
        def __init__(self, model_runner: ModelRunner):
            self.model_runner = model_runner
        def forward_batch_generation(self, batch):
            batch.spec_info = ReplacedInput.create_idle_input()
            self.prepare(batch)
            fb = ForwardBatch.init_new(batch, self.model_runner)
            return self.model_runner.forward(fb)
        def prepare(self, batch):
            batch.spec_info = VerifyInput()
""")

RUNNER = textwrap.dedent("""
    class ModelRunner:
        def forward(self, forward_batch):
            return self._forward_raw(forward_batch)
        def _forward_raw(self, forward_batch):
            can_run_graph = self.graph_runner.can_run(forward_batch)
            if can_run_graph:
                return self.graph_runner.replay(forward_batch)
            if forward_batch.forward_mode.is_idle():
                return self.forward_idle(forward_batch)
            return None
        def forward_idle(self, forward_batch):
            if forward_batch.batch_size > 0:
                self.attn_backend.init_forward_metadata(forward_batch)
    class GraphRunner:
        def capture_one(self, bs):
            fb = ForwardBatch(forward_mode=ForwardMode.IDLE, spec_info=GraphInput.create_idle_input())
            self.model_runner.attn_backend.init_forward_metadata_capture_cuda_graph(fb)
""")

BACKEND = textwrap.dedent("""
    class TritonAttnBackend:
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            if forward_batch.forward_mode.is_decode_or_idle():
                if spec_info is None or spec_info.kv_indptr is None:
                    pass
""")

REGISTRY = textwrap.dedent("""
    @register_attention_backend("triton")
    def create_triton_backend(runner):
        return TritonAttnBackend(runner)
""")


def _tree():
    return memory_tree(
        {
            MODES_FILE: MODES,
            f"{SPEC_DIR}spec_info.py": SPEC,
            f"{SPEC_DIR}eagle_worker_v2.py": WORKER,
            "sglang/srt/model_executor/model_runner.py": RUNNER,
            f"{ATTN_DIR}triton_backend.py": BACKEND,
            f"{ATTN_DIR}attention_registry.py": REGISTRY,
            "sglang/srt/server_args.py": "class ServerArgs:\n    attention_backend: str = None\n"
            "    speculative_draft_attention_backend: str = None\n",
        },
        "toy runners",
    )


def _by_class() -> dict[str, dict]:
    return {f["spec_class"]: f for f in analyse(_tree())["findings"]}


def test_the_idle_verify_input_reaches_the_eager_idle_path_with_its_settings() -> None:
    f = _by_class()["VerifyInput"]
    assert f["mode"] == "IDLE" and f["verdict"] is None
    (path,) = [p for p in f["runner_paths"] if p["fate"] == "reaches"]
    steps = [s["function"] for s in path["path"]]
    assert steps == [
        "EagleWorkerV2.forward_batch_generation",
        "EagleWorkerV2.verify",
        "ModelRunner.forward",
        "ModelRunner._forward_raw",
        "ModelRunner.forward_idle",
    ]
    assert path["path"][-1]["conditions"] == ["forward_batch.batch_size > 0"]
    r = f["reachability"]
    assert r["dp_attention"].startswith("required") and "batch_size > 0" in r["dp_attention"]
    assert r["cuda_graph"].endswith("not (can_run_graph)")
    assert r["workers"] == [{"class": "EagleWorkerV2", "file": f"{SPEC_DIR}eagle_worker_v2.py", "generation": "V2"}]
    assert "EAGLE" in r["algorithms"] and r["backend_flags"] == ["--attention-backend triton"]


def test_the_sites_that_call_init_forward_metadata_are_listed() -> None:
    (site,) = analyse(_tree())["runner_sites"]
    assert (site["function"], site["line"], site["graph"], site["draft"]) == (
        "ModelRunner.forward_idle",
        14,
        False,
        False,
    )
    assert site["conditions"] == ["forward_batch.batch_size > 0"]


def test_an_input_replaced_before_any_forward_is_unreachable() -> None:
    f = _by_class()["ReplacedInput"]
    assert f["verdict"] == "unreachable" and f["verdict_by"] == "runner paths"
    assert "gets another spec_info in NgramWorker.prepare" in f["verdict_reason"]
    assert f["reachability"] is None


def test_an_input_only_graph_capture_uses_is_unreachable() -> None:
    f = _by_class()["GraphInput"]
    assert f["verdict"] == "unreachable" and "CUDA-graph metadata" in f["verdict_reason"]
    assert "init_forward_metadata_capture_cuda_graph" in f["verdict_reason"]
