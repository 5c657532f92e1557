"""The corpus of real upstream crashes: the shipped file holds to its schema, the loader refuses a
malformed case naming it, a case is judged found / missed / not expressible / not shipped from the
lint's findings (a lint that stops reporting loses the case), and the command runs a case on release
wheels (a fake cache offline; the seed case on the real wheels in the network lane)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from upstream_fixtures import ATTN_DIR, MODES_FILE, SPEC_DIR, toy_tree, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.upstream.static.corpus import (
    SPLITS,
    CorpusError,
    case_verdict,
    evidence_problems,
    figures,
    format_corpus,
    judge_case,
    load_corpus,
)
from workbench.upstream.static.lint import analyse

BACKEND = f"{ATTN_DIR}toy_backend.py"
READ = "if spec_info is None or spec_info.kv_indptr is None:"


def _read_line(tree) -> int:
    return next(i for i, ln in enumerate(tree.files[BACKEND].splitlines(), 1) if ln.strip() == READ)


def _toy_case(**changes) -> dict:
    """A case on the toy release: 0.5.12 regressed (no kv_indptr on the idle draft-extend input), 0.5.14 fixed."""
    case = {
        "id": "toy-idle-kv-indptr",
        "title": "toy",
        "threads": [{"url": "https://github.com/sgl-project/sglang/pull/1", "role": "fix"}],
        "error": "AttributeError: 'DraftExtendInput' object has no attribute 'kv_indptr'",
        "kind": "missing attribute on a spec input",
        "crash_site": {"file": BACKEND, "function": "Backend.init_forward_metadata"},
        "releases": {"buggy": ["0.5.12"], "fixed": ["0.5.14"], "fixed_in": "0.5.14", "fix_pr": None},
        "evidence": [
            {"role": "bug", "release": "0.5.12", "file": BACKEND, "line": _read_line(toy_tree(False)), "code": READ}
        ],
        "expected": {
            "backend": "toy",
            "mode": "IDLE",
            "spec_class": "DraftExtendInput",
            "attr": "kv_indptr",
            "read_function": "Backend.init_forward_metadata",
        },
        "outside_contract": None,
        "split": "held_out",
    }
    case.update(changes)
    return case


def _corpus(cases: list[dict]) -> dict:
    return {"schema": "upstream-bug-corpus/1", "split_rule": "toy: every case held out", "cases": cases}


TOY = {"0.5.12": toy_tree(False), "0.5.14": toy_tree(True)}


def _lint(version: str) -> list[dict]:
    return analyse(TOY[version])["findings"]


def test_the_shipped_corpus_gives_every_case_its_thread_releases_expectation_and_split() -> None:
    corpus = load_corpus()
    cases = corpus["cases"]
    assert {c["split"] for c in cases} == set(SPLITS)
    for c in cases:
        assert c["threads"] and all(t["url"].startswith("https://github.com/sgl-project/sglang/") for t in c["threads"])
        assert bool(c.get("expected")) != bool(c.get("outside_contract")), c["id"]
        assert c["split_reason"], c["id"]
        for v in c["releases"]["buggy"]:
            assert any(e["role"] == "bug" and e["release"] == v for e in c["evidence"]), (c["id"], v)
    seed = next(c for c in cases if c["id"] == "triton-idle-draft-extend-kv-indptr")
    assert seed["split"] == "seen" and seed["releases"]["fixed_in"] == "0.5.14"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"split": "train"}, "split 'train' is not one of held_out, seen"),
        ({"outside_contract": "a reason"}, "exactly one of `expected`"),
        ({"expected": None}, "exactly one of `expected`"),
        ({"threads": [{"url": "https://example.com/1", "role": "fix"}]}, "needs a url under"),
        ({"releases": {"buggy": ["0.5.13"], "fixed": []}}, "buggy release 0.5.13 has no `bug` evidence"),
        ({"evidence": [{"role": "bug", "release": "0.5.12", "file": BACKEND, "line": 0, "code": READ}]}, "line 0"),
    ],
)
def test_a_malformed_case_is_refused_naming_the_case_and_field(tmp_path: Path, change: dict, message: str) -> None:
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(_corpus([_toy_case(**change)])))
    with pytest.raises(CorpusError, match="toy-idle-kv-indptr") as err:
        load_corpus(path)
    assert message in str(err.value)


def test_a_wrong_schema_or_a_duplicate_case_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({**_corpus([_toy_case()]), "schema": "upstream-bug-corpus/0"}))
    with pytest.raises(CorpusError, match="schema must be 'upstream-bug-corpus/1'"):
        load_corpus(path)
    path.write_text(json.dumps(_corpus([_toy_case(), _toy_case()])))
    with pytest.raises(CorpusError, match="appears twice"):
        load_corpus(path)


def test_a_case_is_found_only_when_every_buggy_release_reports_it() -> None:
    res = judge_case(_toy_case(), _lint)
    assert res["verdict"] == "found" and res["still_reported_when_fixed"] == []
    assert res["per_release"]["0.5.12"]["reported"] == [f"{BACKEND}:{_read_line(toy_tree(False))}"]
    other = _toy_case(expected={**_toy_case()["expected"], "attr": "kv_indices"})
    assert judge_case(other, _lint)["verdict"] == "missed"
    # A lint that stops reporting the read loses the case: the figure can fail.
    assert judge_case(_toy_case(), lambda v: [])["verdict"] == "missed"
    unreachable = [{**f, "verdict": "unreachable"} for f in _lint("0.5.12")]
    assert judge_case(_toy_case(), lambda v: unreachable if v == "0.5.12" else [])["verdict"] == "missed"


def test_outside_the_contract_and_never_shipped_cases_are_kept_apart_from_the_lint_recall() -> None:
    outside = judge_case(_toy_case(id="x", expected=None, outside_contract="a None field"), _lint)
    assert outside["verdict"] == "not expressible"
    assert outside["per_release"]["0.5.12"]["at_crash_site"] == [
        "toy|IDLE|DraftExtendInput|kv_indptr|Backend.init_forward_metadata"
    ]
    never = judge_case(_toy_case(id="y", releases={"buggy": [], "fixed": ["0.5.14"]}), _lint)
    assert never["verdict"] == "not shipped"
    found = judge_case(_toy_case(id="z", split="seen"), _lint)
    fig = figures([outside, never, found])
    assert fig["held_out"] == {
        "cases": 2,
        "shipped": 1,
        "expressible": 0,
        "found": 0,
        "found_by_family": 0,
        "lint_recall": None,
        "family_recall": 0.0,
    }
    assert fig["seen"]["lint_recall"] == 1.0 and fig["seen"]["family_recall"] == 1.0


def test_evidence_that_the_release_does_not_carry_is_named() -> None:
    case = _toy_case()
    assert evidence_problems(case, TOY.__getitem__) == []
    case["evidence"][0]["line"] += 1
    (problem,) = evidence_problems(case, TOY.__getitem__)
    assert problem.startswith(f"toy-idle-kv-indptr: 0.5.12 {BACKEND}:") and "should be" in problem


def _wheel_files(tree) -> dict[str, str]:
    return {p: t for p, t in tree.files.items() if p.startswith(("sglang/", SPEC_DIR, MODES_FILE))}


def test_the_command_runs_a_case_on_release_wheels_and_fails_closed_on_bad_evidence(tmp_path: Path) -> None:
    cache = write_fake_cache(tmp_path, {v: _wheel_files(t) for v, t in TOY.items()})
    corpus, out = tmp_path / "corpus.json", tmp_path / "out.json"
    corpus.write_text(json.dumps(_corpus([_toy_case()])))
    argv = ["upstream", "--cache-dir", str(cache), "corpus", "--corpus", str(corpus), "--json", str(out)]
    assert workbench_main(argv) == 0
    res = json.loads(out.read_text())
    assert [r["verdict"] for r in res["cases"]] == ["found"] and res["figures"]["held_out"]["lint_recall"] == 1.0
    bad = copy.deepcopy(_toy_case())
    bad["evidence"][0]["code"] = "something else"
    corpus.write_text(json.dumps(_corpus([bad])))
    assert workbench_main(argv) == 2
    assert workbench_main([*argv[:-2], "--case", "no-such-case"]) == 2


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the release wheels; WB_NETWORK_TESTS=1"
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
def test_the_seed_case_is_found_on_the_real_wheels(tmp_path: Path) -> None:
    out = tmp_path / "corpus.json"
    argv = ["upstream", "corpus", "--case", "triton-idle-draft-extend-kv-indptr", "--json", str(out)]
    assert workbench_main(argv) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert case["verdict"] == "found" and case["still_reported_when_fixed"] == []


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
def test_every_evidence_line_holds_and_every_expressible_case_is_found_on_the_real_wheels(tmp_path: Path) -> None:
    out = tmp_path / "corpus.json"
    assert workbench_main(["upstream", "corpus", "--json", str(out)]) == 0  # 2 if an evidence line no longer matches
    cases = json.loads(out.read_text())["cases"]
    assert {c["id"] for c in cases} == {c["id"] for c in load_corpus()["cases"]}
    for c in cases:
        if c["expected"]:
            assert c["verdict"] == "found" and c["still_reported_when_fixed"] == [], c
        for pr in c["per_release"].values():
            # A contract finding in a crashing function means the lint now expresses that case: give it
            # `expected`. (A family finding there is judged by `family_at_crash_site`.)
            assert not pr.get("at_crash_site"), c


def test_a_case_written_before_verdict_reads_and_a_bad_word_is_named() -> None:
    found = judge_case(_toy_case(id="z", split="seen"), _lint)
    old = {k: v for k, v in found.items() if k != "verdict"} | {"outcome": "found"}  # written before `verdict`
    assert case_verdict(old) == case_verdict(found) == "found"
    assert figures([old]) == figures([found])
    assert "verdict" in format_corpus({"cases": [old], "figures": figures([old])}).splitlines()[0]
    with pytest.raises(CorpusError, match=r"case 'z': verdict 'hit'; valid: found, missed, found by the family"):
        case_verdict({**found, "verdict": "hit"})


@pytest.mark.network
@requires_network
@pytest.mark.timeout(900)
def test_the_family_finds_the_fa3_and_dspark_crashes_on_the_release_files() -> None:
    """The two held-out crashes the family missed and now finds (tests/upstream/static/
    test_family_corpus_gaps.py on toy releases): fa3's `seq_lens_cpu.max()` on 0.5.16 / 0.5.17, and
    DSpark's hand-built IDLE batch reaching `can_run_graph` on 0.5.16 and not on 0.5.17 (fixed)."""
    from workbench.upstream.context import UpstreamContext
    from workbench.upstream.sources.trees import release_tree
    from workbench.upstream.static.family import analyse_family

    at = {}
    for v in ("0.5.16", "0.5.17"):
        res = analyse_family(release_tree(UpstreamContext(), v))
        at[v] = {(f["read_function"], f["attr"], f["deref_line"]) for f in res["findings"]}
    fa3 = "FlashAttentionBackend.init_forward_metadata"
    assert (fa3, "seq_lens_cpu", 638) in at["0.5.16"] and (fa3, "seq_lens_cpu", 645) in at["0.5.17"]
    dspark = ("DecodeCudaGraphRunner.can_run_graph", "original_global_num_tokens_cpu")
    assert (*dspark, 531) in at["0.5.16"]
    assert not any(f[:2] == dspark for f in at["0.5.17"])
