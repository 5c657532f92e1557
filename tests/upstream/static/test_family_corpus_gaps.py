"""Gaps of the family analysis found on the bug corpus's held-out crashes, each on a toy release: a
None test does not guard an empty value (fa3's `seq_lens_cpu.max()` on the unpadded IDLE batch), a
field `init_new` passes through a local is still the schedule batch's empty one, and an IDLE batch a
worker builds by hand leaves its other fields None where a model executor runner reads them (DSpark's
`original_global_num_tokens_cpu` in `can_run_graph`)."""

from __future__ import annotations

import textwrap

from upstream_fixtures import ATTN_DIR, MODES, MODES_FILE, SPEC_DIR

from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.family import analyse_family, hand_built_idle_values

SCHEDULE_FILE = "sglang/srt/managers/schedule_batch.py"
RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
DRAFT_RUNNER = "sglang/srt/speculative/draft_cuda_graph_runner.py"

BATCH = MODES + textwrap.dedent("""
    @dataclass
    class ForwardBatch:
        forward_mode: ForwardMode
        seq_lens: "Tensor"
        seq_lens_cpu: "Tensor" = None
        global_num_tokens_cpu: "list" = None
        original_global_num_tokens_cpu: "list" = None
        @classmethod
        def init_new(cls, batch):
            seq_lens_cpu = batch.seq_lens_cpu
            ret = cls(
                forward_mode=batch.forward_mode,
                seq_lens=batch.seq_lens,
                seq_lens_cpu=seq_lens_cpu,
                global_num_tokens_cpu=batch.global_num_tokens,
                original_global_num_tokens_cpu=batch.global_num_tokens,
            )
            return ret
""")

SCHEDULE = textwrap.dedent("""
    class ScheduleBatch:
        def prepare_for_idle(self):
            self.seq_lens_cpu = torch.empty(0, dtype=torch.int64)
""")

BACKEND = textwrap.dedent("""
    class Backend:
        def init_forward_metadata(self, forward_batch):
            seq_lens_cpu = forward_batch.seq_lens_cpu
            eager_max_k = seq_lens_cpu.max().item() if seq_lens_cpu is not None else 0
""")

WORKER = textwrap.dedent("""
    class DraftProposer:
        def run_idle_participation(self, batch):
            idle_batch = ForwardBatch(
                forward_mode=ForwardMode.IDLE,
                seq_lens=torch.empty((0,)),
                seq_lens_cpu=torch.empty((0,)),
            )
            self._fill_sync(idle_batch, batch)
            self.draft_model_runner.forward(idle_batch)
        def _fill_sync(self, forward_batch, batch):
            forward_batch.global_num_tokens_cpu = batch.global_num_tokens
""")

RUNNER_SRC = textwrap.dedent("""
    class DecodeCudaGraphRunner:
        def can_run_graph(self, forward_batch):
            cuda_graph_bs = max(forward_batch.original_global_num_tokens_cpu)
            total = sum(forward_batch.global_num_tokens_cpu)
            return cuda_graph_bs < 8 and total > 0
        def capture_one_batch_size(self, forward_batch):
            return max(forward_batch.original_global_num_tokens_cpu)
""")

DRAFT_RUNNER_SRC = textwrap.dedent("""
    class DraftCudaGraphRunner:
        def can_run_graph(self, forward_batch):
            return max(forward_batch.original_global_num_tokens_cpu) < 8
""")


def _files(backend: str = BACKEND, worker: str = WORKER) -> dict[str, str]:
    return {
        MODES_FILE: BATCH,
        SCHEDULE_FILE: SCHEDULE,
        f"{ATTN_DIR}toy_backend.py": backend,
        f"{SPEC_DIR}dspark_draft.py": worker,
        RUNNER: RUNNER_SRC,
        DRAFT_RUNNER: DRAFT_RUNNER_SRC,
    }


def _line(src: str, text: str) -> int:
    return next(i for i, line in enumerate(src.splitlines(), 1) if text in line)


def _found(res: dict, kind: str, attr: str) -> list[tuple[str, int]]:
    return sorted((f["read_file"], f["deref_line"]) for f in res["findings"] if f["kind"] == kind and f["attr"] == attr)


def test_a_none_test_does_not_guard_an_empty_value_passed_through_a_local() -> None:
    res = analyse_family(memory_tree(_files(), "toy"))
    # `seq_lens_cpu = batch.seq_lens_cpu` then `cls(seq_lens_cpu=seq_lens_cpu)`: the schedule batch's empty one
    assert res["batch_idle_values"]["seq_lens_cpu"]["state"] == "empty"
    # `x.max() if x is not None else 0`: an empty tensor passes the None test and .max() raises
    assert _found(res, "batch-none-deref", "seq_lens_cpu") == [
        (f"{ATTN_DIR}toy_backend.py", _line(BACKEND, "eager_max_k ="))
    ]


def test_a_size_test_guards_an_empty_value() -> None:
    sized = BACKEND.replace("if seq_lens_cpu is not None else 0", "if seq_lens_cpu.numel() else 0")
    assert sized != BACKEND
    res = analyse_family(memory_tree(_files(sized), "toy"))
    assert _found(res, "batch-none-deref", "seq_lens_cpu") == []


def test_a_hand_built_idle_batch_leaves_what_it_does_not_give_none() -> None:
    tree = memory_tree(_files(), "toy")
    vals = hand_built_idle_values(tree)
    # not given and not set by the helper it is handed to: None; the helper's field is set
    assert set(vals) == {"original_global_num_tokens_cpu"}
    assert "DraftProposer.run_idle_participation" in vals["original_global_num_tokens_cpu"]["how"]
    res = analyse_family(tree)
    # read by the model executor's graph runner outside a capture; not in the capture function, not in
    # a speculative draft runner (a worker drives those with its own batches)
    assert _found(res, "runner-none-deref", "original_global_num_tokens_cpu") == [
        (RUNNER, _line(RUNNER_SRC, "cuda_graph_bs = max("))
    ]
    assert _found(res, "runner-none-deref", "global_num_tokens_cpu") == []


def test_the_fix_that_sets_the_field_on_the_hand_built_batch_silences_it() -> None:
    fixed = WORKER.replace(
        "forward_batch.global_num_tokens_cpu = batch.global_num_tokens",
        "forward_batch.global_num_tokens_cpu = batch.global_num_tokens\n"
        "        forward_batch.original_global_num_tokens_cpu = batch.global_num_tokens",
    )
    assert fixed != WORKER
    res = analyse_family(memory_tree(_files(worker=fixed), "toy"))
    assert hand_built_idle_values(memory_tree(_files(worker=fixed), "toy")) == {}
    assert _found(res, "runner-none-deref", "original_global_num_tokens_cpu") == []


def test_a_field_the_hand_built_idle_batch_is_given_as_none_is_none() -> None:
    """`seq_lens=None` given explicitly (a required field, no default): None on that batch, where it is
    given, unless the function sets it after."""
    given_none = WORKER.replace("seq_lens=torch.empty((0,)),", "seq_lens=None,")
    assert given_none != WORKER
    vals = hand_built_idle_values(memory_tree(_files(worker=given_none), "toy"))
    assert set(vals) == {"original_global_num_tokens_cpu", "seq_lens"}
    assert vals["seq_lens"]["file"] == f"{SPEC_DIR}dspark_draft.py"
    assert vals["seq_lens"]["line"] == _line(given_none, "seq_lens=None,")
    assert "given None" in vals["seq_lens"]["how"]
    set_after = given_none.replace(
        "self._fill_sync(idle_batch, batch)",
        "idle_batch.seq_lens = batch.seq_lens\n        self._fill_sync(idle_batch, batch)",
    )
    assert set(hand_built_idle_values(memory_tree(_files(worker=set_after), "toy"))) == {
        "original_global_num_tokens_cpu"
    }


def test_a_batch_built_for_another_mode_is_not_an_idle_batch() -> None:
    decode = WORKER.replace("forward_mode=ForwardMode.IDLE", "forward_mode=ForwardMode.DECODE")
    assert decode != WORKER
    assert hand_built_idle_values(memory_tree(_files(worker=decode), "toy")) == {}


MODEL_RUNNER = "sglang/srt/model_executor/model_runner.py"
MODEL_RUNNER_SRC = textwrap.dedent("""
    class ModelRunner:
        def forward(self, forward_batch):
            return self._forward_raw(forward_batch)
        def _forward_raw(self, forward_batch):
            return max(forward_batch.original_global_num_tokens_cpu)
        def sample(self, forward_batch):
            return max(forward_batch.original_global_num_tokens_cpu)
""")


def test_in_the_model_runner_only_what_forward_reaches_gets_the_hand_built_batch() -> None:
    res = analyse_family(memory_tree({**_files(), MODEL_RUNNER: MODEL_RUNNER_SRC}, "toy"))
    got = {(f["read_function"], f["deref_line"]) for f in res["findings"] if f["read_file"] == MODEL_RUNNER}
    # `sample` is not on forward's path: the worker hands its IDLE batch to forward only
    assert got == {("ModelRunner._forward_raw", _line(MODEL_RUNNER_SRC, "return max("))}
