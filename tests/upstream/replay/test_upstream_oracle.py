"""Recall judged by real code: oracle mutants drawn from the independent read sites, the verdict of a
mutant from its replay against the release's own, the per-kind figures and the cache of outcomes."""

from __future__ import annotations

import ast
import json
import os

import pytest
from upstream_fixtures import ATTN_DIR, SPEC_DIR, toy_tree

from workbench.cli import main as workbench_main
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.replay import oracle
from workbench.upstream.replay.run_end import OLD_OUTCOMES
from workbench.upstream.static.classes import collect, spec_input_classes
from workbench.upstream.static.mutate import MutationError
from workbench.upstream.static.site_mutants import (
    BATCH_REASON,
    DRIVER_BATCH_FIELDS,
    RUNNER_REASON,
    SHARED_FACTOR,
    SHARED_KINDS,
    SiteMutant,
    build_mutants,
    idle_default_none,
    is_dataclass_field,
    padded_fields,
    sample,
    set_batch_idle_none,
    set_idle_none,
    set_padded_none,
)

CTX = UpstreamContext(log=quiet)
INFO, BACKEND = f"{SPEC_DIR}info.py", f"{ATTN_DIR}toy_backend.py"


def _by_name(built: dict) -> dict:
    return {m.name: m for m in built["mutants"]}


def _pooled(stand_in_replay, chunks: list[int] | None = None):
    """A stand-in for `oracle_pool.replay_mutants` (no release environment here): each job replayed by
    `stand_in_replay` on the release's tree with the job's changes, as the pool's forked child runs it;
    `chunks` collects how many jobs each call got."""

    def run(ctx, tree, jobs, limit_s):
        if chunks is not None:
            chunks.append(len(jobs))
        return {n: stand_in_replay(ctx, tree.with_changes(ch, f"{tree.label} [{n}]"), cs) for n, ch, cs in jobs}

    return run


def _idle_toy():
    """The toy whose draft-extend idle input gives `kv_indptr` and `hidden_states` empty tensors (the
    toy's own leaves them at their dataclass default None, so a None there would be the release itself)."""
    tree = toy_tree(with_field=True)
    empty = "return cls(kv_indptr=torch.empty((0,)), hidden_states=torch.empty((0, 4)))"
    text = tree.files[INFO].replace("return cls()", empty)
    return tree.with_changes({INFO: text})


def test_mutants_come_from_the_sites_with_their_cases() -> None:
    # the toy's idle input leaves kv_indptr at its default None: no mutant, listed as equivalent
    toy = build_mutants(toy_tree(with_field=True))
    name = "toy_backend.py kv_indptr: None from DraftExtendInput.create_idle_input"
    assert "equivalent mutant" in toy["skipped"][name]
    assert not [m for m in toy["mutants"] if m.kind == "none-deref"]
    built = build_mutants(_idle_toy())
    ms = _by_name(built)
    removed = ms["toy_backend.py draft_token_num: removed from VerifyInput"]
    assert removed.kind == "missing-attribute" and "draft_token_num" not in removed.changes[INFO]
    assert [c["key"] for c in removed.cases] == [f"{BACKEND}:Backend|TARGET_VERIFY|VerifyInput"]
    assert removed.cases[0]["trace"] and removed.cases[0]["answer_missing"] is False
    guard = ms["toy_backend.py kv_indptr: guard removed, VerifyInput lacks it"]
    assert 'getattr(spec_info, "kv_indptr"' not in guard.changes[BACKEND]
    idle = ms["toy_backend.py kv_indptr: None from DraftExtendInput.create_idle_input"]
    assert idle.kind == "none-deref" and "cls(kv_indptr=None, hidden_states=" in idle.changes[INFO]
    assert idle.digest() != SiteMutant(**{**idle.__dict__, "kind": "missing-attribute"}).digest()  # judge rule
    assert {c["batch"] for c in idle.cases} == {"IDLE padded", "DRAFT_EXTEND_V2"}  # the toy has no DRAFT_EXTEND
    # the toy's forward_batch_info.py has no ForwardBatch: no field to leave None
    assert not [m for m in built["mutants"] if m.kind in ("batch-none-deref", "runner-none-deref")]
    # every unguarded attention spec_info site is a none-deref site; no lint call decides the population
    assert built["sites"]["missing-attribute"] > built["sites"]["none-deref"] > 0
    # a method is not a field: named as skipped, not dropped
    assert any("is_draft_input" in k for k in built["skipped"])


def test_idle_none_replaces_or_adds_the_keyword_and_refuses_an_equivalent_mutant() -> None:
    text = toy_tree(with_field=True).files[INFO]
    out = set_idle_none(text, INFO, "DraftExtendInput", "hidden_states", True)
    ast.parse(out)
    assert "return cls(hidden_states=None)" in out
    again = out.replace("hidden_states=None", "hidden_states=h")
    assert "hidden_states=None" in set_idle_none(again, INFO, "DraftExtendInput", "hidden_states", True)
    with pytest.raises(MutationError, match="already gives"):
        set_idle_none(out, INFO, "DraftExtendInput", "hidden_states", True)
    with pytest.raises(MutationError, match="not a dataclass field"):
        set_idle_none(text, INFO, "DraftExtendInput", "positions", False)
    with pytest.raises(MutationError, match="defines no create_idle_input"):
        set_idle_none(text, INFO, "VerifyInput", "draft_token_num", True)
    # a field at its dataclass default None that create_idle_input does not give: the release itself
    with pytest.raises(MutationError, match="equivalent mutant"):
        set_idle_none(text, INFO, "DraftExtendInput", "kv_indptr", True, default_none=True)


def test_a_default_none_is_told_from_a_default_the_constructor_sets() -> None:
    spec = toy_tree(with_field=True).under(SPEC_DIR)
    classes, own = spec_input_classes(spec), collect(spec)
    assert idle_default_none(spec, classes["DraftExtendInput"], "kv_indptr", own)
    # VerifyInput sets draft_token_num in __init__; custom_mask is a plain class attribute
    assert not idle_default_none(spec, classes["VerifyInput"], "draft_token_num", own)
    assert not idle_default_none(spec, classes["DraftExtendInput"], "custom_mask", own)
    post = spec[INFO].replace(
        "super().__init__(SpecInputType.DRAFT_EXTEND)",
        "super().__init__(SpecInputType.DRAFT_EXTEND)\n        self.kv_indptr = 0",
    )
    spec2 = {**spec, INFO: post}
    assert not idle_default_none(spec2, spec_input_classes(spec2)["DraftExtendInput"], "kv_indptr", collect(spec2))


def test_sampling_is_deterministic_per_kind_and_release() -> None:
    ms = build_mutants(_idle_toy())["mutants"]
    one = [m.name for m in sample(ms, "0.5.14", 1)]
    assert one == [m.name for m in sample(ms, "0.5.14", 1)]
    assert sorted({m.kind for m in sample(ms, "0.5.14", 1)}) == ["missing-attribute", "none-deref"]
    # in rounds: each kind's first, then each kind's second
    assert [m.kind for m in sample(ms, "0.5.14", 2)] == ["missing-attribute", "none-deref"] * 2
    assert len(sample(ms, "x", None)) == sum(1 for m in ms if m.cases)
    assert sample(ms, "x", None, real_only=True) == []  # the toy backend is traced


def _rec(
    outcome: str, at: str | None = None, message: str = "", exc: str = "AttributeError", ran=(), entered=(), **more
) -> dict:
    status, stop = OLD_OUTCOMES[outcome]  # named in the driver's earlier words, written in today's fields
    run = {"status": status, "raised_at": at, "message": message, "exception": exc, "ran": list(ran)}
    run.update({"stopped_at": stop} if stop else {})
    return {"case": {"batch": "TARGET_VERIFY"}, "runs": [{**run, "entered": list(entered), **more}]}


def test_a_case_is_judged_against_the_release_as_shipped() -> None:
    m = _by_name(build_mutants(toy_tree(with_field=True)))["toy_backend.py draft_token_num: removed from VerifyInput"]
    site = m.sites[0]
    here = f"{site['file']}:{site['line']}"
    missing = "'VerifyInput' object has no attribute 'draft_token_num'"
    assert oracle.judge_case(m, _rec("raised", here, missing), _rec("completed"))[0] == "raised here"
    # the release raises the same: not the mutant's doing
    assert oracle.judge_case(m, _rec("raised", here, missing), _rec("raised", here, missing))[0] == "blocked"
    # raised in another file first
    assert oracle.judge_case(m, _rec("raised", "sglang/x.py:3", missing), _rec("completed"))[0] == "blocked"
    entered = [f"{site['file']}:{site['function']}"]
    assert oracle.judge_case(m, _rec("completed", ran=[here], entered=entered), _rec("completed"))[0] == "clean"
    # the run never entered the site's function: no evidence either way
    assert oracle.judge_case(m, _rec("completed", entered=["x.py:Other.f"]), _rec("completed"))[0] == "not reached"
    assert oracle.judge_case(m, {"error": "boom", "stage": "batch"}, None)[0] == "blocked"
    lib = {
        "case": {"batch": "X"},
        "runs": [{"status": "ok", "stopped_at": "library call", "library_call": "flashinfer.f"}],
    }
    assert oracle.judge_case(m, lib, _rec("completed"))[0] == "blocked"
    assert oracle.verdict(m, [("raised here", "a"), ("blocked", "b")])[0] == "confirmed"
    assert oracle.verdict(m, [("clean", "a"), ("clean", "b")])[0] == "refuted"
    assert oracle.verdict(m, [("clean", "a"), ("blocked", "b")])[0] == "undecided"
    assert oracle.verdict(m, [("clean", "a"), ("not reached", "b")])[0] == "refuted"
    assert oracle.verdict(m, [("not reached", "a")])[0] == "undecided"


def test_a_none_deref_case_is_clean_only_where_a_site_line_ran() -> None:
    m = _by_name(build_mutants(_idle_toy()))["toy_backend.py kv_indptr: None from DraftExtendInput.create_idle_input"]
    site = next(s for s in m.sites if s["function"] == "Backend.init_forward_metadata")
    here, entered = f"{site['file']}:{site['line']}", [f"{site['file']}:{site['function']}"]
    # the site's function ran, no site line on either run: the case does not reach the read
    out, why = oracle.judge_case(m, _rec("completed", entered=entered), _rec("completed", entered=entered))
    assert out == "not reached" and "nor on the release" in why
    assert oracle.verdict(m, [(out, why)])[0] == "undecided"
    # the line ran with the None and did not raise
    assert oracle.judge_case(m, _rec("completed", ran=[here], entered=entered), _rec("completed"))[0] == "clean"
    # the line ran on the release only: the None turned the path away from the read
    out, why = oracle.judge_case(m, _rec("completed", entered=entered), _rec("completed", ran=[here]))
    assert out == "clean" and "turned the path away" in why
    # the older rule still holds for a missing-attribute mutant (its cached outcomes were judged by it)
    other = _by_name(build_mutants(_idle_toy()))["toy_backend.py draft_token_num: removed from VerifyInput"]
    ent = [f"{other.sites[0]['file']}:{other.sites[0]['function']}"]
    assert oracle.judge_case(other, _rec("completed", entered=ent), _rec("completed"))[0] == "clean"


FB_TOY = """
@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    seq_lens: Tensor = None
    extend_seq_lens: Tensor = None
    num_token_non_padded: Tensor = None
    @classmethod
    def init_new(cls, batch, model_runner):
        ret = cls(forward_mode=batch.forward_mode, batch_size=batch.batch_size, seq_lens=batch.seq_lens)
        ret.num_token_non_padded = 3
        if ret.forward_mode.is_idle():
            return ret
        ret.extend_seq_lens = batch.extend_seq_lens
        return ret
"""
# the DP padding: seq_lens padded whatever it holds, extend_seq_lens only when set
PAD = """
    def _pad_inputs_to_size(self, model_runner, num_tokens, bs):
        self.seq_lens = self._pad_tensor_to_size(self.seq_lens, bs)
        if self.extend_seq_lens is not None:
            self.extend_seq_lens = self._pad_tensor_to_size(self.extend_seq_lens, bs)
"""
BATCH_BACKEND = """
class Batched:
    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_decode_or_idle():
            m = forward_batch.seq_lens.max()
            n = forward_batch.num_token_non_padded + 1
"""
RUNNER = """
class EagerRunner:
    def _execute_idle(self, forward_batch):
        return forward_batch.seq_lens.shape[0]
"""
GRAPH_RUNNER = """
class CudaGraphRunner:
    def replay(self, forward_batch):
        return forward_batch.seq_lens.shape[0]
"""


def _batch_tree():
    from upstream_fixtures import MODES, MODES_FILE

    return toy_tree(with_field=True).with_changes(
        {
            MODES_FILE: MODES + FB_TOY + PAD,
            f"{ATTN_DIR}batched_backend.py": BATCH_BACKEND,
            "sglang/srt/model_executor/runner/eager_runner.py": RUNNER,
            "sglang/srt/model_executor/cuda_graph_runner.py": GRAPH_RUNNER,
        }
    )


def test_forward_batch_and_runner_mutants_leave_a_field_none_in_init_new() -> None:
    from upstream_fixtures import MODES_FILE

    from workbench.upstream.static.family import analyse_family
    from workbench.upstream.static.lint import analyse

    tree = _batch_tree()
    built = build_mutants(tree)
    ms = _by_name(built)
    seq = ms["batched_backend.py seq_lens: None on the IDLE batch (init_new)"]
    assert seq.kind == "batch-none-deref" and seq.op == "idle None"
    assert (
        "        if ret.forward_mode.is_idle():\n            ret.seq_lens = None\n            return ret"
        in (seq.changes[MODES_FILE])
    )
    assert [(c["backend_class"], c["batch"], c["batch_none"]) for c in seq.cases] == [
        ("Batched", "IDLE padded", ["seq_lens"])
    ]
    # a field the driver's batch never sets is None in the control too: built, not run
    ntp = ms["batched_backend.py num_token_non_padded: None on the IDLE batch (init_new)"]
    assert "num_token_non_padded" not in DRIVER_BATCH_FIELDS and ntp.undecided == BATCH_REASON and not ntp.cases
    # the idle runner path's file runs on the triton backend; a CUDA-graph runner is not replayed
    run = ms["eager_runner.py seq_lens: None on the IDLE batch (init_new)"]
    assert run.kind == "runner-none-deref" and [c["backend_class"] for c in run.cases] == ["TritonAttnBackend"]
    assert run.cases[0]["watch"] == ["sglang/srt/model_executor/runner/eager_runner.py:4"]
    graph = ms["cuda_graph_runner.py seq_lens: None on the IDLE batch (init_new)"]
    assert graph.undecided == RUNNER_REASON and not graph.cases
    # the family sees the mutated init_new: it reports the backend's dereference
    mt = tree.with_changes(seq.changes)
    lint = analyse(mt)
    assert oracle.lint_report(seq, lint, analyse_family(mt, lint))["reported"]
    base = analyse(tree)
    assert not oracle.lint_report(seq, base, analyse_family(tree, base))["reported"]


def test_a_field_the_padding_pads_is_also_left_none_after_the_padding() -> None:
    """None before the DP padding raises in the padding (seq_lens is padded whatever it holds): its
    second mutant is the padding leaving it None, which the driver replays by leaving it None after
    the release's own padding."""
    from upstream_fixtures import MODES_FILE

    # extend_seq_lens is padded only when set: None passes through the padding, no second mutant
    assert padded_fields(FB_TOY + PAD, "f.py") == {"seq_lens"}
    out = set_padded_none(FB_TOY + PAD, "f.py", "seq_lens")
    ast.parse(out)
    assert out.rstrip().endswith("if self.forward_mode.is_idle():\n            self.seq_lens = None")
    ms = _by_name(build_mutants(_batch_tree()))
    m = ms["batched_backend.py seq_lens: None after the DP padding (_pad_inputs_to_size)"]
    assert m.op == "padded None" and m.kind == "batch-none-deref" and set(m.changes) == {MODES_FILE}
    assert [(c["batch_none_after"], c.get("batch_none")) for c in m.cases] == [(["seq_lens"], None)]
    assert oracle.shares_process(m)
    assert padded_fields("class ForwardBatch:\n    pass\n", "f.py") == set()
    with pytest.raises(MutationError, match="no _pad_inputs_to_size"):
        set_padded_none("class ForwardBatch:\n    pass\n", "f.py", "seq_lens")


def test_set_batch_idle_none_adds_an_idle_block_where_init_new_has_none() -> None:
    text = FB_TOY.replace("        if ret.forward_mode.is_idle():\n            return ret\n", "")
    out = set_batch_idle_none(text, "f.py", "seq_lens")
    ast.parse(out)
    assert out.rstrip().endswith("if ret.forward_mode.is_idle():\n            ret.seq_lens = None\n        return ret")
    with pytest.raises(MutationError, match="no init_new"):
        set_batch_idle_none("class ForwardBatch:\n    pass\n", "f.py", "seq_lens")


def test_forward_batch_mutants_share_one_replay_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """They edit only `init_new`, which the driver never runs: one process on the release's sources
    for all of them, each judged against the release's own run of its case."""
    calls: list[tuple[str, list[str]]] = []

    def stand_in_replay(ctx, target, cases):
        calls.append((target.label, [c["key"] for c in cases]))
        out = []
        for c in cases:
            if c.get("batch_none") == ["seq_lens"] and "eager_runner" not in c["watch"][0]:
                out.append(_rec("raised", c["watch"][0], "'NoneType' object has no attribute 'max'"))
            else:
                out.append(_rec("completed", entered=[w.rsplit(":", 1)[0] + ":x" for w in c["watch"]]))
            out[-1]["case"] = c
        return {"status": "ok", "cases": out, "run_s": 0.0}

    monkeypatch.setattr(oracle, "replay", stand_in_replay)
    monkeypatch.setattr(oracle, "replay_mutants", _pooled(stand_in_replay))
    tree = _batch_tree()
    tree.release = "0.5.14"
    res = oracle.release_oracle(CTX, tree, None, {})
    shared = [m for m in build_mutants(tree)["mutants"] if oracle.shares_process(m)]
    assert {m.kind for m in shared} == {"batch-none-deref", "runner-none-deref"}
    # one control, one process for every forward-batch mutant, one per other mutant; all on the
    # release's own tree but the per-mutant ones
    ones = [label for label, _ in calls[2:]]
    assert [label for label, _ in calls[:2]] == [tree.label, tree.label] and all("[" in x for x in ones)
    assert len(calls) == 2 + sum(1 for m in build_mutants(tree)["mutants"] if m.cases and not oracle.shares_process(m))
    # the control ran each case without the None field, under the key the mutants' cases name
    assert all("|" in k and "None on the IDLE batch" not in k for k in calls[0][1])
    byname = {r["name"]: r for r in res["mutants"]}
    assert byname["batched_backend.py seq_lens: None on the IDLE batch (init_new)"]["oracle"] == "confirmed"


def test_a_class_level_default_of_a_plain_class_is_not_a_constructor_keyword() -> None:
    from workbench.upstream.static.classes import spec_input_classes

    spec = toy_tree(with_field=True).under(SPEC_DIR)
    classes = spec_input_classes(spec)
    assert is_dataclass_field(spec, classes["DraftExtendInput"], "hidden_states")
    # SpecInput.custom_mask: a plain class's default; DraftExtendInput(custom_mask=None) is a TypeError
    assert not is_dataclass_field(spec, classes["DraftExtendInput"], "custom_mask")


def test_the_idle_runner_path_and_the_stand_ins_are_judged() -> None:
    tree = _batch_tree()
    m = _by_name(build_mutants(tree))["eager_runner.py seq_lens: None on the IDLE batch (init_new)"]
    at = "sglang/srt/model_executor/runner/eager_runner.py:4"
    err = "AttributeError: 'NoneType' object has no attribute 'shape'"
    idle = {"path": "EagerRunner._execute_idle", "error": f"failed before the metadata: {err}", "raised_at": at}
    ok = {"path": "EagerRunner._execute_idle", "metadata_called": True}
    got = _rec("completed", idle_path=idle)
    assert oracle.judge_case(m, got, _rec("completed", idle_path=ok))[0] == "raised here"
    # the release's own idle path raised the same: not the mutant's doing
    assert oracle.judge_case(m, got, _rec("completed", idle_path=idle))[0] != "raised here"
    b = _by_name(build_mutants(tree))["batched_backend.py seq_lens: None on the IDLE batch (init_new)"]
    entered = [f"{ATTN_DIR}batched_backend.py:Batched.init_forward_metadata"]
    handed = ["flashinfer.plan at x.py:3 [None: 1]"]
    run = _rec("completed", entered=entered, library_passed=handed)
    # a None handed to a GPU library stand-in: the stand-in cannot say what the library does with it
    assert oracle.judge_case(b, run, _rec("completed", entered=entered, library_passed=[]))[0] == "blocked"
    assert oracle.judge_case(b, run, _rec("completed", entered=entered, library_passed=handed))[0] == "clean"
    # a runner field None after the padding handed to the model stand-in: the stand-in cannot say either
    p = _by_name(build_mutants(tree))["eager_runner.py seq_lens: None after the DP padding (_pad_inputs_to_size)"]
    ran = [f"{at.rsplit(':', 1)[0]}:EagerRunner._execute_idle"]
    model = _rec("completed", entered=ran, library_passed=["model stand-in forward at x.py:3 [None: 0]"])
    got = oracle.judge_case(
        p, model, _rec("completed", entered=ran, library_passed=["model stand-in forward at x.py:3"])
    )
    assert got[0] == "blocked" and "None handed to a stand-in" in got[1]


def test_figures_recall_precision_and_unreachable() -> None:
    def r(v: str, rep: bool, unr: bool = False) -> dict:
        return {"kind": "missing-attribute", "name": f"{v}{rep}{unr}", "oracle": v, "reported": rep, "unreachable": unr}

    recs = [r("confirmed", True), r("confirmed", False), r("confirmed", True, True), r("refuted", True)]
    recs += [r("undecided", True), r("refuted", False, False)]
    k = oracle.figures(recs)["missing-attribute"]
    assert (k["run"], k["confirmed"], k["refuted"], k["undecided"], k["reported"]) == (6, 3, 2, 1, 4)
    assert k["recall"] == round(2 / 3, 3) and k["precision"] == round(2 / 3, 3)
    assert (k["unreachable_reported"], k["unreachable_confirmed"]) == (1, 1) and k["missed"] == ["confirmedFalseFalse"]
    assert oracle.figures([])["none-deref"]["recall"] is None


def test_the_lint_report_of_a_mutant_is_read_from_the_mutated_tree() -> None:
    from workbench.upstream.static.family import analyse_family
    from workbench.upstream.static.lint import analyse

    tree = toy_tree(with_field=True)
    m = _by_name(build_mutants(tree))["toy_backend.py draft_token_num: removed from VerifyInput"]
    mt = tree.with_changes(m.changes)
    lint = analyse(mt)
    assert oracle.lint_report(m, lint, analyse_family(mt, lint))["reported"]
    base = analyse(tree)
    assert not oracle.lint_report(m, base, analyse_family(tree, base))["reported"]


def test_the_run_replays_each_mutant_once_and_reuses_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay` is replaced by a stand-in (no release environment here): the release completes every
    case; a mutant's run raises at its first site line when it removes `draft_token_num`."""
    calls: list[str] = []

    def stand_in_replay(ctx, target, cases):
        calls.append(target.label)
        out = []
        for c in cases:
            if "draft_token_num" in target.label:
                here = c["watch"][0]
                out.append(_rec("raised", here, "'VerifyInput' object has no attribute 'draft_token_num'"))
            else:  # every function of the backend ran
                out.append(_rec("completed", entered=[f"{BACKEND}:Backend.init_forward_metadata"]))
            out[-1]["case"] = c
        return {"status": "ok", "cases": out, "run_s": 0.0}

    chunks: list[int] = []
    monkeypatch.setattr(oracle, "replay", stand_in_replay)
    monkeypatch.setattr(oracle, "replay_mutants", _pooled(stand_in_replay, chunks))
    monkeypatch.setattr(oracle, "POOL_CHUNK", 4)
    tree = toy_tree(with_field=True)
    tree.release = "0.5.14"
    cache: dict = {}
    saved: list[int] = []
    res = oracle.release_oracle(CTX, tree, None, cache, checkpoint=lambda: saved.append(len(cache)))
    # the cache is saved after every replayed mutant; it also keeps the control replay's status
    assert saved == list(range(2, len(res["mutants"]) + 2))
    assert cache["0.5.14|control replay"]["control_ok"] is True
    json.dumps(res)
    byname = {r["name"]: r for r in res["mutants"]}
    hit = byname["toy_backend.py draft_token_num: removed from VerifyInput"]
    assert hit["oracle"] == "confirmed" and hit["reported"]
    # a site in a function the run never entered (`_fallback`, `update_single` alone) is undecided
    for n, r in byname.items():
        if "draft_token_num" not in n:
            ran = any("Backend.init_forward_metadata" in s for s in r["sites"])
            assert r["oracle"] == ("refuted" if ran else "undecided"), n
    k = res["kinds"]["missing-attribute"]
    assert k["confirmed"] == 1 and k["recall"] == 1.0 and k["refuted"] + k["undecided"] == k["run"] - 1
    assert res["kinds"]["batch-none-deref"]["run"] == 0
    n = len(calls)
    assert n == 1 + len(res["mutants"]) and len(cache) == 1 + len(res["mutants"])
    # the stricter judge: the stand-in raised at the mutant's first site line
    assert hit["at_site"] is True and k["confirmed_at_site"] == 1 and k["recall_at_site"] == 1.0
    # the mutants ran POOL_CHUNK at a time in one release interpreter each
    full, rest = divmod(len(res["mutants"]), oracle.POOL_CHUNK)
    assert chunks == [oracle.POOL_CHUNK] * full + ([rest] if rest else []) and full >= 1
    again = oracle.release_oracle(CTX, tree, None, cache)
    assert len(calls) == n and all(r["cached"] for r in again["mutants"])
    assert again["kinds"] == res["kinds"] and "the run that filled the cache" in again["control_replay"]
    # the cache keeps the oracle's outcome only: the lint side is the current lint's on every run
    key = next(k for k, r in cache.items() if r.get("name") == hit["name"])
    assert set(cache[key]) >= set(oracle.ORACLE_FIELDS) and "reported" not in cache[key]
    cache[key] = {**cache[key], "reported": False}  # a stale lint answer stored by an older run is not read
    assert {r["name"]: r for r in oracle.release_oracle(CTX, tree, None, cache)["mutants"]}[hit["name"]]["reported"]
    # lint=False fills the cache without the lint: no mutant counts as reported or missed
    bare = oracle.release_oracle(CTX, tree, None, cache, lint=False)
    assert all(r["reported"] is None for r in bare["mutants"]) and bare["kinds"]["missing-attribute"]["recall"] == 0.0


def _result(confirmed: int, hit: int, unparsed=(), control_ok: bool = True) -> dict:
    recs = [
        {"kind": "none-deref", "name": f"m{i}", "oracle": "confirmed", "reported": i < hit, "unreachable": False}
        for i in range(confirmed)
    ]
    rel = {
        "sites": dict.fromkeys(oracle.KINDS, 1),
        "population": dict.fromkeys(oracle.KINDS, confirmed),
        "runnable": dict.fromkeys(oracle.KINDS, confirmed),
        "kinds": oracle.figures(recs),
        "unparsed": list(unparsed),
        "control_ok": control_ok,
    }
    return {"releases": {"0.5.14": rel}, "sampling": "all runnable mutants", "cache": {}}


@pytest.mark.parametrize(
    ("result", "rc"),
    [
        (_result(10, 9), 0),  # recall 0.9 on 10 confirmed
        (_result(10, 8), 1),  # recall 0.8 on 10 confirmed
        (_result(9, 0), 0),  # under 10 confirmed: no recall target
        (_result(10, 10, unparsed=["sglang/srt/layers/attention/x.py: invalid syntax (line 3)"]), 2),
        (_result(10, 10, control_ok=False), 2),
    ],
)
def test_the_oracle_command_exit_codes(result: dict, rc: int, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(oracle, "oracle_recall", lambda ctx, versions, command, per_kind, previous, real_only: result)
    out = tmp_path / "o.json"
    argv = ["upstream", "--cache-dir", str(tmp_path), "recall", "--oracle", "--sglang", "0.5.14", "--json", str(out)]
    assert workbench_main(argv) == rc
    assert json.loads(out.read_text())["releases"]["0.5.14"]["kinds"] == result["releases"]["0.5.14"]["kinds"]


def test_a_negative_sample_size_is_a_usage_error(tmp_path) -> None:
    argv = ["upstream", "--cache-dir", str(tmp_path), "recall", "--oracle", "--sglang", "0.5.14", "--per-kind", "-1"]
    assert workbench_main(argv) == 2


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1",
    reason="network test: needs the release's environment; WB_NETWORK_TESTS=1",
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(3600)
def test_oracle_recall_on_a_real_release_subset(tmp_path) -> None:
    out = tmp_path / "oracle.json"
    rc = workbench_main(["upstream", "recall", "--oracle", "--sglang", "0.5.14", "--per-kind", "2", "--json", str(out)])
    res = json.loads(out.read_text())
    rel = res["releases"]["0.5.14"]
    assert rc in (0, 1) and rel["control_replay"].startswith("ok")
    want = {k: min(2 * (SHARED_FACTOR if k in SHARED_KINDS else 1), n) for k, n in rel["runnable"].items()}
    assert {k: v["run"] for k, v in rel["kinds"].items()} == want
    assert all(m["oracle"] in ("confirmed", "refuted", "undecided") and m["oracle_reason"] for m in rel["mutants"])
    # one outcome per replayed mutant, and the control replay's status
    assert len(res["cache"]) == sum(want.values()) + 1 and res["cache"]["0.5.14|control replay"]["control_ok"]


def test_the_model_stand_in_lists_its_calls_with_the_none_arguments() -> None:
    from workbench.upstream.in_release import stubs
    from workbench.upstream.replay.wb_driver.idle import StandInModel

    stubs.STATE.passed.clear()
    assert StandInModel().forward(None, 3, forward_batch=None) is None
    assert len(stubs.STATE.passed) == 1 and stubs.STATE.passed[0].endswith("[None: 0, forward_batch]")
    stubs.STATE.passed.clear()


def test_a_stand_in_answers_a_flag_from_its_constructor_keyword() -> None:
    """Under CPU stand-ins (the oracle's traced cases) a library object's flag is what its constructor
    was given (`stubs.FLAGS`), not a truthy stub: a wrapper built without `use_cuda_graph` is no
    CUDA-graph wrapper, so the backend takes its eager path."""
    from workbench.upstream.in_release import stubs

    stubs.install({"wb_fake_flag_lib"})
    from wb_fake_flag_lib import Wrapper

    eager, graph = Wrapper(workspace=1), Wrapper(workspace=1, use_cuda_graph=True)
    stubs.STATE.stand_in = True
    try:
        with stubs.armed():
            assert eager.is_cuda_graph_enabled is False and graph.is_cuda_graph_enabled is True
    finally:
        stubs.STATE.stand_in = False
    assert "wb_fake_flag_lib.Wrapper().is_cuda_graph_enabled = False (its constructor's use_cuda_graph)" in (
        stubs.STATE.answered
    )


def test_a_seeded_cache_keeps_the_oracle_s_outcome_only(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """An older run's `--json` (whose entries carried its lint's answer) seeds the oracle outcomes alone."""
    old = {"kind": "none-deref", "name": "m", "oracle": "refuted", "oracle_reason": "clean", "replay_s": 1.0}
    previous = tmp_path / "o.json"
    previous.write_text(json.dumps({"cache": {"0.5.14|m|d": {**old, "reported": True, "by": ["family"]}}}))
    seen: list[dict] = []
    monkeypatch.setattr(oracle, "check_versions", lambda ctx, versions: versions)
    monkeypatch.setattr(oracle, "release_tree", lambda ctx, v: None)
    monkeypatch.setattr(oracle, "release_oracle", lambda ctx, tree, per_kind, cache, **kw: seen.append(dict(cache)))
    oracle.oracle_recall(CTX, ["0.5.14"], "cmd", None, previous)
    assert seen == [{"0.5.14|m|d": old}]


def test_a_case_is_built_only_for_a_batch_the_release_builds() -> None:
    """The oracle's cases by the release's own worker code (`role_evidence`, `idle_called`), not the lint's
    install scan: a `*Draft*` class that no function setting DRAFT_EXTEND_V2 names gets no draft-extend
    case (0.5.23's draft inputs: only `EagleDraftExtendInput` is installed there); a class whose
    `create_idle_input` nobody calls gets no IDLE case (0.5.23's `UnoDraftInput`); a subclass of a class a
    TARGET_VERIFY function takes keeps its verify case (`FrozenKVMTPVerifyInput` of `EagleVerifyInput`)."""
    import textwrap

    from upstream_fixtures import MODES, MODES_FILE

    from workbench.upstream.sources.trees import memory_tree
    from workbench.upstream.static.site_mutants import idle_called, role_evidence

    spec = textwrap.dedent("""
        class SpecInput:
            def __init__(self, spec_input_type):
                self.spec_input_type = spec_input_type
        @dataclass
        class NextDraftInput(SpecInput):
            kv_indptr: "Tensor" = None
            @classmethod
            def create_idle_input(cls, device):
                return cls()
        @dataclass
        class ExtendDraftInput(SpecInput):
            kv_indptr: "Tensor" = None
        @dataclass
        class BaseVerifyInput(SpecInput):
            kv_indptr: "Tensor" = None
        class SubVerifyInput(BaseVerifyInput):
            pass
    """)
    worker = textwrap.dedent("""
        def prepare_for_draft_extend(draft_extend_input: "ExtendDraftInput", batch):
            batch.spec_info = draft_extend_input
            batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else ForwardMode.DRAFT_EXTEND_V2
        def prepare_for_verify(verify_input: Optional[BaseVerifyInput], batch):
            batch.forward_mode = ForwardMode.TARGET_VERIFY
        class Worker:
            def forward(self, batch):
                batch.spec_info = NextDraftInput(kv_indptr=None)
    """)
    graph = textwrap.dedent("""
        def capture(batch):
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
            batch.spec_info = NextDraftInput()
    """)
    backend = textwrap.dedent("""
        class Backend:
            def init_forward_metadata(self, forward_batch):
                x = forward_batch.spec_info.kv_indptr
    """)
    files = {
        MODES_FILE: MODES,
        f"{SPEC_DIR}info.py": spec,
        f"{SPEC_DIR}worker.py": worker,
        f"{SPEC_DIR}draft_cuda_graph_runner.py": graph,  # graph capture builds its own inputs: no evidence
        BACKEND: backend,
    }
    tree = memory_tree(files, "toy")
    roles = role_evidence(tree.under(SPEC_DIR))
    assert {"ExtendDraftInput"} <= roles["DRAFT_EXTEND_V2"] and "NextDraftInput" not in roles["DRAFT_EXTEND_V2"]
    assert "BaseVerifyInput" in roles["TARGET_VERIFY"]
    assert idle_called(tree) == set()
    ms = {m.name: m for m in build_mutants(tree)["mutants"]}
    cases = {
        name.split("removed from ")[1]: [c["batch"] for c in m.cases] for name, m in ms.items() if "removed" in name
    }
    assert cases == {
        "ExtendDraftInput": ["DRAFT_EXTEND_V2"],
        "SubVerifyInput": ["TARGET_VERIFY"],
        "BaseVerifyInput": ["TARGET_VERIFY"],
        "NextDraftInput": [],
    }
    assert (
        "no batch of its role that the release builds"
        in ms["toy_backend.py kv_indptr: removed from NextDraftInput"].undecided
    )
    # once the release calls its idle constructor, the IDLE case is back
    files[f"{SPEC_DIR}worker.py"] += "def idle(batch):\n    batch.spec_info = NextDraftInput.create_idle_input('cpu')\n"
    again = {m.name: m for m in build_mutants(memory_tree(files, "toy"))["mutants"]}
    assert [c["batch"] for c in again["toy_backend.py kv_indptr: removed from NextDraftInput"].cases] == ["IDLE padded"]


GRAPH_FILE = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
DSPARK = "sglang/srt/speculative/dspark_components/dspark_draft.py"
DECODE_GRAPH = """
class DecodeCudaGraphRunner:
    def can_run_graph(self, forward_batch):
        return forward_batch.batch_size <= 8 and max(forward_batch.seq_lens) < 4 and forward_batch.num_token_non_padded
"""
DSPARK_SRC = """
class DraftBlockProposer:
    def run_idle_participation(self, batch):
        idle_batch = ForwardBatch(forward_mode=ForwardMode.IDLE, batch_size=0, seq_lens=torch.empty((0,)))
        self._fill_dp_moe_sync_metadata(idle_batch, batch)
        self.draft_model_runner.forward(idle_batch)
    def _fill_dp_moe_sync_metadata(self, forward_batch, batch):
        forward_batch.batch_size = 0
        forward_batch.global_num_tokens_cpu = gnt
"""


def _graph_tree():
    return _batch_tree().with_changes({GRAPH_FILE: DECODE_GRAPH, DSPARK: DSPARK_SRC})


def test_a_decode_graph_runner_field_is_left_none_by_dspark_s_hand_built_idle_batch() -> None:
    from workbench.upstream.replay import runner_decisions
    from workbench.upstream.static import site_mutants

    # the same files as the graph-runner replay's
    assert (site_mutants.GRAPH_RUNNER_FILE, site_mutants.DSPARK_FILE) == (
        runner_decisions.RUNNER_FILE,
        runner_decisions.DSPARK_FILE,
    )
    assert site_mutants.GRAPH_SCENARIO == runner_decisions.SCENARIO
    built = build_mutants(_graph_tree())
    ms = _by_name(built)
    m = ms["decode_cuda_graph_runner.py seq_lens: None from run_idle_participation's ForwardBatch"]
    assert m.kind == "runner-none-deref" and m.op == "dspark idle None" and oracle.is_graph(m)
    assert "seq_lens=None)" in m.changes[DSPARK] and set(m.changes) == {DSPARK}
    (case,) = m.cases
    assert case["graph_runner"] and case["control_key"] == site_mutants.GRAPH_CONTROL_KEY
    assert case["watch"] == [f"{GRAPH_FILE}:4"] and site_mutants.GRAPH_STAND_IN in case["batch"]
    # set again by the DP-metadata fill: a None in the constructor is overwritten; not given: its default
    skipped = built["skipped"]
    assert (
        "equivalent mutant"
        in skipped["decode_cuda_graph_runner.py batch_size: None from run_idle_participation's ForwardBatch"]
    )
    assert (
        "does not give"
        in skipped["decode_cuda_graph_runner.py num_token_non_padded: None from run_idle_participation's ForwardBatch"]
    )
    # the init_new mutant of the same site stays, undecided: the hand-built batch never runs init_new
    assert ms["decode_cuda_graph_runner.py seq_lens: None on the IDLE batch (init_new)"].undecided == RUNNER_REASON
    # no DSpark on the release: no graph mutant
    assert not [x for x in build_mutants(_batch_tree())["mutants"] if x.op == "dspark idle None"]


def test_a_graph_runner_mutant_is_judged_by_the_graph_runner_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay` is a stand-in (no release environment here): the graph-runner scenario's control decides
    with every site line run; the mutant's run raises at the site line on the None."""
    from workbench.upstream.replay.runner_decisions import SERVER_ARGS

    graph_calls: list[tuple[str, list[str]]] = []

    def stand_in_replay(ctx, target, cases, extra=None):
        out = []
        for c in cases:
            if not c.get("graph_runner"):
                out.append({**_rec("completed", entered=[f"{BACKEND}:Backend.init_forward_metadata"]), "case": c})
                continue
            assert extra == {"server_args": SERVER_ARGS}
            graph_calls.append((target.label, c["watch"]))
            here = f"{GRAPH_FILE}:4"
            if "seq_lens: None" in target.label:
                run = _rec("raised", here, "'NoneType' object is not iterable", exc="TypeError")
            else:
                run = _rec("completed", ran=[here], entered=[f"{GRAPH_FILE}:DecodeCudaGraphRunner.can_run_graph"])
                run["runs"][0].update(stopped_at="graph decision", can_run_graph=True)
            out.append({**run, "case": c})
        return {"status": "ok", "cases": out, "run_s": 0.0}

    monkeypatch.setattr(oracle, "replay", stand_in_replay)
    monkeypatch.setattr(oracle, "replay_mutants", _pooled(stand_in_replay))
    tree = _graph_tree()
    tree.release = "0.5.16"
    res = oracle.release_oracle(CTX, tree, None, {}, lint=False)
    rec = {r["name"]: r for r in res["mutants"]}[
        "decode_cuda_graph_runner.py seq_lens: None from run_idle_participation's ForwardBatch"
    ]
    assert rec["oracle"] == "confirmed" and "TypeError: 'NoneType' object is not iterable" in rec["oracle_reason"]
    assert "STAND-IN: DecodeCudaGraphRunner.capture" in rec["oracle_reason"]
    # one control run of the scenario on the release, one run of the mutant with its edit
    assert [label for label, _ in graph_calls] == [
        tree.label,
        f"{tree.label} [{rec['name']}]",
    ]

    # the scenario does not run on the release itself: its mutants are not replayed, undecided with why
    def failing(ctx, target, cases, extra=None):
        if any(c.get("graph_runner") for c in cases):
            graph_calls.append((target.label, []))
            return {"status": "error", "cases": [], "run_s": 0.0, "message": "ValueError: DSpark needs CUDA"}
        return stand_in_replay(ctx, target, cases, extra)

    graph_calls.clear()
    monkeypatch.setattr(oracle, "replay", failing)
    res = oracle.release_oracle(CTX, tree, None, {}, lint=False)
    rec = {r["name"]: r for r in res["mutants"]}[rec["name"]]
    assert rec["oracle"] == "undecided" and "did not run on the release itself: ValueError" in rec["oracle_reason"]
    assert len(graph_calls) == 1


def test_a_release_that_raises_first_in_the_scenario_is_judged_with_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The release's own crash before the graph runner decides (0.5.16's corpus case) would block every
    mutant: they run on the release with the fix of that crash (`runner_decisions.apply_fix`), named."""
    from workbench.upstream.replay.runner_decisions import FIX_LINE

    seen: list[bool] = []

    def stand_in_replay(ctx, target, cases, extra=None):
        out = []
        for c in cases:
            if not c.get("graph_runner"):
                out.append({**_rec("completed", entered=[f"{BACKEND}:Backend.init_forward_metadata"]), "case": c})
                continue
            fixed = FIX_LINE in target.files[DSPARK]
            seen.append(fixed)
            if not fixed:
                run = _rec("raised", f"{GRAPH_FILE}:9", "'NoneType' object is not iterable", exc="TypeError")
            elif "seq_lens=None" in target.files[DSPARK]:
                run = _rec("raised", f"{GRAPH_FILE}:4", "'NoneType' object is not iterable", exc="TypeError")
            else:
                run = _rec("completed", ran=[f"{GRAPH_FILE}:4"], entered=[f"{GRAPH_FILE}:X.can_run_graph"])
                run["runs"][0].update(stopped_at="graph decision", can_run_graph=True)
            out.append({**run, "case": c})
        return {"status": "ok", "cases": out, "run_s": 0.0}

    monkeypatch.setattr(oracle, "replay", stand_in_replay)
    monkeypatch.setattr(oracle, "replay_mutants", _pooled(stand_in_replay))
    tree = _graph_tree()
    tree.release = "0.5.16"
    res = oracle.release_oracle(CTX, tree, None, {}, lint=False)
    rec = {r["name"]: r for r in res["mutants"]}[
        "decode_cuda_graph_runner.py seq_lens: None from run_idle_participation's ForwardBatch"
    ]
    # the control as shipped, the control with the fix, then the mutant on the fixed release
    assert seen == [False, True, True] and rec["oracle"] == "confirmed"
    assert "with the fix applied" in rec["oracle_reason"] and f"{GRAPH_FILE}:9" in rec["oracle_reason"]
