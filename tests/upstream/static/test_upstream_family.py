"""The idle-batch family (static/family.py): None / empty IDLE fields dereferenced, offline on synthetic sources."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from upstream_fixtures import ATTN_DIR, MODES, MODES_FILE, SPEC_DIR, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.upstream.replay import family_verdicts as replay_family
from workbench.upstream.replay.cases import case_key
from workbench.upstream.sources.trees import memory_tree
from workbench.upstream.static.corpus import figures, judge_case
from workbench.upstream.static.family import KINDS, analyse_family, count_by_kind

RUNNER = "sglang/srt/model_executor/cuda_graph_runner.py"

BATCH = MODES + textwrap.dedent("""
    @dataclass
    class ForwardBatch:
        forward_mode: ForwardMode
        seq_lens: "Tensor"
        extend_prefix_lens: "Tensor" = None
        later_set: "Tensor" = None
        positions: "Tensor" = None
        @classmethod
        def init_new(cls, batch):
            ret = cls(forward_mode=batch.forward_mode, seq_lens=batch.seq_lens)
            if ret.forward_mode.is_idle():
                ret.positions = torch.empty((0,), dtype=torch.int64)
            if ret.forward_mode.is_extend():
                ret.extend_prefix_lens = batch.prefix_lens
            return ret
        def prepare_mlp_sync_batch(self):
            self.later_set = 1
""")

SPEC = textwrap.dedent("""
    from dataclasses import dataclass
    class SpecInput:
        def __init__(self, spec_input_type):
            self.spec_input_type = spec_input_type
    @dataclass
    class DraftInput(SpecInput):
        topk_p: "Tensor" = None
        kv_indptr: "Tensor" = None
        hidden_states: "Tensor" = None
        def __post_init__(self):
            super().__init__(SpecInputType.DRAFT)
        @classmethod
        def create_idle_input(cls, device, hidden_size):
            return cls(
                topk_p=torch.empty((0, 1), device=device),
                hidden_states=torch.empty((0, hidden_size)) if hidden_size is not None else None,
            )
""")

WORKER = textwrap.dedent("""
    class Worker:
        def idle_draft(self, batch):
            batch.spec_info = DraftInput.create_idle_input(device="cpu", hidden_size=None)
""")

BACKEND = textwrap.dedent("""
    class Backend:
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            if forward_batch.forward_mode.is_decode_or_idle():
                kv_indptr, other = spec_info.kv_indptr, 1
                bs = kv_indptr.shape[0] - 1
                top = spec_info.topk_p.max()
                shape = spec_info.topk_p.shape
                n = forward_batch.extend_prefix_lens.shape[0]
                m = forward_batch.later_set + 1
                if spec_info.hidden_states is not None:
                    h = spec_info.hidden_states.shape
            elif forward_batch.forward_mode.is_target_verify():
                h = spec_info.hidden_states.shape
""")

RUNNER_SRC = textwrap.dedent("""
    class CudaGraphRunner:
        def can_run(self, forward_batch):
            return max(forward_batch.extend_prefix_lens) < 8
        def capture(self, bs):
            return max(self.forward_batch.extend_prefix_lens)
""")


def _files(backend: str = BACKEND) -> dict[str, str]:
    return {
        MODES_FILE: BATCH,
        f"{SPEC_DIR}info.py": SPEC,
        f"{SPEC_DIR}worker.py": WORKER,
        f"{ATTN_DIR}toy_backend.py": backend,
        RUNNER: RUNNER_SRC,
    }


def _lines(src: str, text: str) -> int:
    return next(i for i, line in enumerate(src.splitlines(), 1) if text in line)


def test_idle_values_are_read_from_the_idle_constructors() -> None:
    res = analyse_family(memory_tree(_files(), "toy"))
    spec = {a: v["state"] for a, v in res["spec_idle_values"]["DraftInput"].items()}
    # given empty, given `x if c else None`, left at the dataclass default None
    assert spec == {"topk_p": "empty", "hidden_states": "None", "kv_indptr": "None"}
    batch = {a: v["state"] for a, v in res["batch_idle_values"].items()}
    # set only under is_extend(): None on IDLE; set empty under is_idle(); a field a ForwardBatch method sets is not
    assert batch == {"extend_prefix_lens": "None", "positions": "empty"}


def test_each_kind_reports_the_unguarded_dereferences_on_the_idle_path_and_nothing_else() -> None:
    res = analyse_family(memory_tree(_files(), "toy"))
    got = sorted((f["kind"], f["spec_class"], f["attr"], f["deref_line"], f["deref_op"]) for f in res["findings"])
    assert got == [
        ("batch-none-deref", "ForwardBatch", "extend_prefix_lens", _lines(BACKEND, "n = forward_batch"), ".shape"),
        ("none-deref", "DraftInput", "kv_indptr", _lines(BACKEND, "bs = kv_indptr"), ".shape"),
        ("none-deref", "DraftInput", "topk_p", _lines(BACKEND, "top = "), ".max()"),
        (
            "runner-none-deref",
            "ForwardBatch",
            "extend_prefix_lens",
            _lines(RUNNER_SRC, "return max(forward_batch"),
            "max()",
        ),
    ]
    # .shape of an empty tensor, a None-checked read, a read in a branch without IDLE: none reported
    assert count_by_kind(res["findings"]) == dict(zip(KINDS, [2, 1, 1], strict=True))
    keys = {f["key"] for f in res["findings"]}
    assert "none-deref|toy|IDLE|DraftInput|kv_indptr|Backend.init_forward_metadata" in keys
    alias = next(f for f in res["findings"] if f["attr"] == "kv_indptr")
    assert (
        alias["read_line"] == _lines(BACKEND, "kv_indptr, other =")
        and "dataclass default None" in alias["idle_value_how"]
    )


def test_a_none_check_before_the_dereference_silences_it() -> None:
    fixed = BACKEND.replace("bs = kv_indptr.shape[0] - 1", "bs = 0 if kv_indptr is None else kv_indptr.shape[0] - 1")
    assert fixed != BACKEND
    res = analyse_family(memory_tree(_files(fixed), "toy"))
    assert "kv_indptr" not in {f["attr"] for f in res["findings"]}


def test_an_attribute_the_walk_writes_is_not_reported() -> None:
    written = BACKEND.replace(
        "        spec_info = forward_batch.spec_info\n",
        "        spec_info = forward_batch.spec_info\n        forward_batch.spec_info.kv_indptr = self.buf\n",
    )
    assert written != BACKEND
    res = analyse_family(memory_tree(_files(written), "toy"))
    assert "kv_indptr" not in {f["attr"] for f in res["findings"]}


def test_the_command_reports_per_kind_and_names_an_unparseable_file_with_exit_2(tmp_path: Path) -> None:
    cache = write_fake_cache(tmp_path, {"0.5.12": _files()})
    out = tmp_path / "family.json"
    argv = ["upstream", "--cache-dir", str(cache), "family", "--sglang", "0.5.12", "--json", str(out)]
    assert workbench_main(argv) == 0
    res = json.loads(out.read_text())["releases"]["0.5.12"]
    assert res["counts"] == {"none-deref": 2, "batch-none-deref": 1, "runner-none-deref": 1}
    broken = {**_files(), f"{ATTN_DIR}broken_backend.py": "def f(:\n"}
    cache2 = write_fake_cache(tmp_path / "b", {"0.5.12": broken})
    assert (
        workbench_main(["upstream", "--cache-dir", str(cache2), "family", "--sglang", "0.5.12", "--json", str(out)])
        == 2
    )
    assert any("broken_backend.py" in u for u in json.loads(out.read_text())["releases"]["0.5.12"]["unparsed"])


def test_a_corpus_case_outside_the_contract_is_found_by_the_family_only_at_its_crash_site() -> None:
    res = analyse_family(memory_tree(_files(), "toy"))
    case = {
        "id": "toy-none",
        "split": "held_out",
        "threads": [{"url": "https://example.invalid/1"}],
        "releases": {"buggy": ["0.5.12"], "fixed": []},
        "expected": None,
        "outside_contract": "a None field dereferenced",
        "crash_site": {"file": f"{ATTN_DIR}toy_backend.py", "function": "Backend.init_forward_metadata"},
    }
    found = judge_case(case, lambda v: [], lambda v: res["findings"])
    assert found["verdict"] == "found by the family"
    elsewhere = judge_case(
        {**case, "crash_site": {**case["crash_site"], "function": "Backend.other"}},
        lambda v: [],
        lambda v: res["findings"],
    )
    assert elsewhere["verdict"] == "not expressible"
    assert figures([found, elsewhere])["held_out"]["family_recall"] == 0.5


def _record(g: dict, kind: str, run: dict) -> dict:
    return {"case": {"key": case_key(g, kind), "batch": kind}, "batch": {"kind": kind}, "runs": [run]}


def test_replay_verdicts_need_the_error_at_the_dereference_line(monkeypatch) -> None:
    res = analyse_family(memory_tree(_files(), "toy"))
    res["findings"] = [f for f in res["findings"] if f["kind"] != "batch-none-deref"]
    (f,) = [f for f in res["findings"] if f["attr"] == "kv_indptr"]
    loc = f"{f['read_file']}:{f['deref_line']}"
    g = {**f, "read_line": f["deref_line"]}
    not_called = {
        "status": "ok",
        "stopped_at": "no metadata call",
        "message": "the idle path does not call init_forward_metadata",
    }
    runs = {
        "raised here": {
            "status": "crashed",
            "raised_at": loc,
            "exception": "AttributeError",
            "message": "'NoneType' object has no attribute 'shape'",
            "ran": [loc],
        },
        "ran": {"status": "ok", "ran": [loc]},
        "elsewhere": {
            "status": "crashed",
            "raised_at": f"{f['read_file']}:1",
            "exception": "KeyError",
            "message": "x",
            "ran": [],
        },
    }
    # the toy backend is not a CPU one (triton, torch_native): its verdicts are the traced ones
    want = {"raised here": "traced: raised", "ran": "traced: not read", "elsewhere": "unverified"}
    for name, run in runs.items():
        cases = [_record(g, "IDLE padded", run), _record(g, "IDLE unpadded", not_called)]
        monkeypatch.setattr(replay_family, "replay", lambda ctx, tree, planned, c=cases: {"status": "ok", "cases": c})
        out, summary = replay_family.family_verdicts(None, None, res)
        got = {h["attr"]: h for h in out}
        assert got["kv_indptr"]["verdict"] == want[name], (name, got["kv_indptr"]["verdict_reason"])
        assert summary["status"] == "ok"
    runner = next(h for h in out if h["kind"] == "runner-none-deref")
    assert runner["verdict"] == "unverified" and "not a runner's methods" in runner["verdict_reason"]


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the release wheels; WB_NETWORK_TESTS=1"
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
def test_the_0_5_12_draft_pass_none_shape_is_found_and_confirmed_by_replay(tmp_path: Path) -> None:
    out = tmp_path / "family.json"
    assert workbench_main(["upstream", "family", "--sglang", "0.5.12", "--replay", "--json", str(out)]) == 0
    res = json.loads(out.read_text())["releases"]["0.5.12"]
    key = "none-deref|triton|IDLE|EagleDraftInput|kv_indptr|TritonAttnBackend.init_forward_metadata"
    (f,) = [f for f in res["findings"] if f["key"] == key]
    assert (f["read_file"].rsplit("/", 1)[-1], f["deref_line"], f["deref_op"]) == ("triton_backend.py", 333, ".shape")
    assert f["verdict"] == "confirmed" and "'NoneType' object has no attribute 'shape'" in f["verdict_reason"]


CALLEE_BACKEND = textwrap.dedent("""
    class Backend:
        def init_forward_metadata(self, forward_batch):
            if forward_batch.forward_mode.is_decode_or_idle():
                kv_indices = self._scratch(forward_batch.later_none, forward_batch.seq_lens.device)
                checked = self._checked(forward_batch.later_none)
        def _scratch(self, required_tokens, device):
            if self.buf is None or self.buf.numel() < 1:
                self.buf = torch.empty(required_tokens, dtype=torch.int32, device=device)
            return self.buf
        def _checked(self, n):
            if n is None:
                return 0
            return torch.zeros(n)
""")


def _callee_files(backend: str, batch: str = BATCH) -> dict[str, str]:
    idle_none = "        if ret.forward_mode.is_idle():\n            ret.later_none = None\n        return ret\n"
    edited = batch.replace("        return ret\n", idle_none).replace(
        '    positions: "Tensor" = None\n', '    positions: "Tensor" = None\n    later_none: int = None\n', 1
    )
    assert edited.count("later_none") == batch.count("later_none") + 2
    return {**_files(backend), MODES_FILE: edited}


def test_a_none_handed_to_a_callee_is_dereferenced_where_the_callee_uses_it() -> None:
    res = analyse_family(memory_tree(_callee_files(CALLEE_BACKEND), "toy"))
    (f,) = [f for f in res["findings"] if f["attr"] == "later_none"]
    assert (f["kind"], f["deref_line"], f["deref_op"]) == (
        "batch-none-deref",
        _lines(CALLEE_BACKEND, "self.buf = torch.empty(required_tokens"),
        "torch.empty() size",
    )
    assert f["read_line"] == _lines(CALLEE_BACKEND, "kv_indices = self._scratch") and f["read_function"] == (
        "Backend._scratch"
    )
    assert f["passed"] == f"passed as required_tokens to Backend._scratch at toy_backend.py:{f['read_line']}"
    # the callee that tests its parameter for None is guarded; so is a caller that tests the field first
    guarded = CALLEE_BACKEND.replace(
        "            kv_indices = self._scratch(",
        "            if forward_batch.later_none is None:\n"
        "                return\n"
        "            kv_indices = self._scratch(",
    )
    assert guarded != CALLEE_BACKEND
    assert not [
        f for f in analyse_family(memory_tree(_callee_files(guarded), "toy"))["findings"] if f["attr"] == "later_none"
    ]


def test_a_parameter_rebound_in_the_callee_is_not_the_caller_s_none() -> None:
    rebound = CALLEE_BACKEND.replace(
        "        if self.buf is None", "        required_tokens = 8\n        if self.buf is None"
    )
    assert rebound != CALLEE_BACKEND
    assert not [
        f for f in analyse_family(memory_tree(_callee_files(rebound), "toy"))["findings"] if f["attr"] == "later_none"
    ]


PADDING = textwrap.dedent("""
    def prepare_mlp_sync_batch(self):
        self.later_set = 1
        if self.forward_mode.is_decode_or_idle():
            if self.flag:
                self.later_none = 4
            elif self.extend_in_batch:
                self.forward_mode = ForwardMode.EXTEND
            elif self.seq_lens.shape[0] == 0:
                self.later_none = 1
            else:
                pass
""")
PADDED = BATCH.replace(
    "    def prepare_mlp_sync_batch(self):\n        self.later_set = 1\n", textwrap.indent(PADDING.lstrip("\n"), "    ")
)
assert PADDED != BATCH


def test_a_none_the_dp_padding_sets_again_on_every_idle_path_is_not_reported() -> None:
    # seq_lens is empty on the unpadded IDLE batch (prepare_for_idle), so `shape[0] == 0` holds there;
    # a path that relabels the batch EXTEND hands no IDLE batch on
    schedule = textwrap.dedent("""
        class ScheduleBatch:
            def prepare_for_idle(self):
                self.seq_lens = torch.empty(0, dtype=torch.int64)
    """)
    files = _callee_files(CALLEE_BACKEND, PADDED)
    files["sglang/srt/managers/schedule_batch.py"] = schedule
    res = analyse_family(memory_tree(files, "toy"))
    assert "later_none" not in res["batch_idle_values"]
    # set again only on some IDLE paths (another branch is not decided by the mode or an empty field): reported
    partial = PADDED.replace("elif self.seq_lens.shape[0] == 0:", "elif self.other:")
    files[MODES_FILE] = _callee_files(CALLEE_BACKEND, partial)[MODES_FILE]
    res = analyse_family(memory_tree(files, "toy"))
    assert res["batch_idle_values"]["later_none"]["state"] == "None"
    assert [f["deref_op"] for f in res["findings"] if f["attr"] == "later_none"] == ["torch.empty() size"]


PAD_BATCH = BATCH.replace(
    "    def prepare_mlp_sync_batch(self):\n        self.later_set = 1\n",
    textwrap.indent(
        textwrap.dedent("""
            def prepare_mlp_sync_batch(self):
                self.later_set = 1
                self._pad_inputs_to_size(2)
            def _pad_inputs_to_size(self, bs):
                self.seq_lens = self._pad_tensor_to_size(self.seq_lens, bs)
                self.positions = self._pad_tensor_to_size(self.positions, bs)
        """).lstrip("\n"),
        "    ",
    ),
)
assert PAD_BATCH != BATCH
PAD_BACKEND = textwrap.dedent("""
    class Backend:
        def init_forward_metadata(self, forward_batch):
            if forward_batch.forward_mode.is_decode_or_idle():
                self._fill(forward_batch.seq_lens, forward_batch.positions)
                ok = torch.is_tensor(forward_batch.positions)
        def _fill(self, seq_lens, positions):
            indptr = torch.cumsum(seq_lens, dim=0)
            fill_kernel[(2,)](positions, indptr, None)
""")


def _padded_none(block: str) -> dict:
    """The family of the toy tree whose `_pad_inputs_to_size` ends with `block` (a field left None)."""
    body = textwrap.indent(textwrap.dedent(block).strip("\n"), " " * 8) + "\n"
    end = "        self.positions = self._pad_tensor_to_size(self.positions, bs)\n"
    res = analyse_family(memory_tree({**_files(PAD_BACKEND), MODES_FILE: PAD_BATCH.replace(end, end + body)}, "toy"))
    return {**res, "findings": _in_backend(res)}


def _in_backend(res: dict) -> list[dict]:
    """The findings in the toy backend (the runner file's own stay out of these tests)."""
    return [f for f in res["findings"] if f["read_file"].endswith("toy_backend.py")]


def test_a_none_left_after_the_dp_padding_is_reported_where_the_backend_uses_it() -> None:
    # the padding pads seq_lens and positions: neither is None after it (positions stays empty on the
    # unpadded IDLE batch, init_new's, which only a dereference needing an element would crash on)
    plain = analyse_family(memory_tree({**_files(PAD_BACKEND), MODES_FILE: PAD_BATCH}, "toy"))
    assert "seq_lens" not in plain["batch_idle_values"] and not _in_backend(plain)
    assert plain["batch_idle_values"]["positions"]["state"] == "empty"
    # the padding's callee leaves seq_lens None on an IDLE batch: its value after the padding wins
    res = _padded_none("if self.forward_mode.is_idle():\n    self.seq_lens = None")
    val = res["batch_idle_values"]["seq_lens"]
    assert val["state"] == "None" and "ForwardBatch._pad_inputs_to_size under IDLE (after the DP padding)" in val["how"]
    (f,) = res["findings"]
    assert (f["kind"], f["attr"], f["deref_line"], f["deref_op"], f["read_function"]) == (
        "batch-none-deref",
        "seq_lens",
        _lines(PAD_BACKEND, "torch.cumsum(seq_lens"),
        "torch.cumsum() input",
        "Backend._fill",
    )
    # a Triton launch's argument is a dereference; `torch.is_tensor(None)` is not
    res = _padded_none("if self.forward_mode.is_idle():\n    self.positions = None")
    assert [(f["attr"], f["deref_op"]) for f in res["findings"]] == [("positions", "Triton kernel argument")]
    # None only in a branch an IDLE batch cannot take, or set again after it: not reported
    assert not _padded_none("if self.forward_mode.is_extend():\n    self.seq_lens = None")["findings"]
    assert not _padded_none("self.seq_lens = None\nself.seq_lens = self._pad_tensor_to_size(self.seq_lens, bs)")[
        "findings"
    ]


@pytest.mark.network
@requires_network
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("version", "raised"),
    [
        ("0.5.14", {"seq_lens": (343, "torch.cumsum() input"), "req_pool_indices": (344, "Triton kernel argument")}),
        ("0.5.23", {"seq_lens": (526, "torch.cumsum() input")}),
    ],
)
def test_a_none_after_the_release_s_dp_padding_is_found_where_real_code_raised(
    version: str, raised: dict[str, tuple[int, str]]
) -> None:
    """The oracle's mutant (`_pad_inputs_to_size` leaving the field None on an IDLE batch) raised in
    `triton_backend.py` at that line on the padded IDLE batch; the family reports it there."""
    from workbench.upstream.context import UpstreamContext, quiet
    from workbench.upstream.sources.trees import release_tree
    from workbench.upstream.static.site_mutants import set_padded_none

    tree = release_tree(UpstreamContext(log=quiet), version)
    shipped = analyse_family(tree)["batch_idle_values"]
    for attr, (line, op) in raised.items():
        # the release as shipped pads the field: at most empty on the unpadded IDLE batch, never None
        assert shipped.get(attr, {}).get("state") != "None"
        mutated = tree.with_changes({MODES_FILE: set_padded_none(tree.files[MODES_FILE], MODES_FILE, attr)})
        res = analyse_family(mutated)
        assert "after the DP padding" in res["batch_idle_values"][attr]["how"]
        hits = [
            (f["kind"], f["deref_op"])
            for f in res["findings"]
            if f["attr"] == attr and f["read_file"] == f"{ATTN_DIR}triton_backend.py" and f["deref_line"] == line
        ]
        assert ("batch-none-deref", op) in hits, (attr, hits)


# the None tests of 0.5.14-0.5.23's flashinfer / flashinfer_mla / triton decode paths, in small
GUARDED = textwrap.dedent("""
    class Updater:
        def update(self, forward_batch):
            self.call_begin_forward(forward_batch.seq_lens)
        def update_spec(self, forward_batch):
            self.call_begin_forward(forward_batch.seq_lens, spec_info=forward_batch.spec_info)
        def call_begin_forward(self, lens, spec_info=None):
            if spec_info is None:
                k = lens
            else:
                k = spec_info.topk_p
                s = k.shape
    class Backend:
        def __init__(self):
            self.updater = Updater()
        def init_forward_metadata(self, forward_batch):
            spec_info = forward_batch.spec_info
            if forward_batch.forward_mode.is_decode_or_idle():
                self.updater.update(forward_batch)
                if spec_info is None or getattr(spec_info, "kv_indptr", None) is None:
                    kv_indptr, top = forward_batch.seq_lens, forward_batch.seq_lens
                else:
                    kv_indptr, top = spec_info.kv_indptr, spec_info.topk_p
                    bs = kv_indptr.shape[0] - 1
                t = top.max()
                if spec_info.kv_indptr is not None:
                    hs = spec_info.hidden_states.shape
""")


def test_a_none_test_guards_its_branch_and_a_branch_the_idle_batch_cannot_take() -> None:
    src = GUARDED
    res = analyse_family(memory_tree(_files(src), "toy"))
    got = sorted((f["attr"], f["deref_line"]) for f in res["findings"] if f["kind"] == "none-deref")
    # `getattr(spec_info, "kv_indptr", None) is None` tests kv_indptr: its else reads it not None;
    # topk_p (empty on IDLE) is read in that else, then `.max()` after it: the alias keeps the else's
    # facts, and kv_indptr is None on IDLE, so the else never runs on IDLE; the same for hidden_states
    # under `spec_info.kv_indptr is not None`; call_begin_forward's else needs a spec_info that
    # `update` leaves at its default None
    assert got == []
    # with the idle input giving kv_indptr, each of those paths runs on IDLE and is reported
    spec = SPEC.replace("topk_p=torch.empty((0, 1), device=device),", "topk_p=torch.empty((0, 1)), kv_indptr=x,")
    res = analyse_family(memory_tree({**_files(src), f"{SPEC_DIR}info.py": spec}, "toy"))
    got = sorted((f["attr"], f["deref_op"], f["deref_line"]) for f in res["findings"] if f["kind"] == "none-deref")
    assert got == [
        ("hidden_states", ".shape", _lines(src, "hs = spec_info.hidden_states.shape")),
        ("topk_p", ".max()", _lines(src, "t = top.max()")),
    ]
    # a caller that hands spec_info on reaches call_begin_forward's else: topk_p `.shape` is no crash on
    # an empty tensor, but `.max()` there would be
    src2 = src.replace("s = k.shape", "s = k.max()").replace(
        "self.updater.update(forward_batch)", "self.updater.update_spec(forward_batch)"
    )
    res = analyse_family(memory_tree(_files(src2), "toy"))
    got = sorted((f["attr"], f["deref_line"]) for f in res["findings"] if f["kind"] == "none-deref")
    assert got == [("topk_p", _lines(src2, "s = k.max()"))]
