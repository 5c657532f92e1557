"""Recall by mutation: the rewrites produce real source, the recall run finds every planted finding on
the toy release with clean controls, and a weakened lint visibly loses recall (the measure can fail)."""

from __future__ import annotations

import ast
import json
import os

import pytest
from upstream_fixtures import SPEC_DIR, toy_tree

from workbench.cli import main as workbench_main
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.static import flow
from workbench.upstream.static.mutate import MOVES, add_attribute, move_install, remove_attribute, remove_guard
from workbench.upstream.static.recall import KINDS, release_recall

CTX = UpstreamContext(log=quiet)
INFO, WORKER = f"{SPEC_DIR}info.py", f"{SPEC_DIR}worker.py"


def test_attribute_removal_keeps_every_line_and_the_control_adds_it_back() -> None:
    text = toy_tree(with_field=True).files[INFO]
    gone = remove_attribute(text, INFO, "VerifyInput", "draft_token_num")
    assert len(gone.splitlines()) == len(text.splitlines()) and "draft_token_num" not in gone
    gone = remove_attribute(text, INFO, "DraftExtendInput", "kv_indptr")
    cls = next(n for n in ast.parse(gone).body if getattr(n, "name", "") == "DraftExtendInput")
    assert not any(getattr(getattr(s, "target", None), "id", "") == "kv_indptr" for s in cls.body)
    back = add_attribute(gone, INFO, "DraftExtendInput", "kv_indptr")
    assert "kv_indptr = None" in back
    with pytest.raises(ValueError, match="method or property"):
        remove_attribute(text, INFO, "DraftExtendInput", "prepare")


@pytest.mark.parametrize("how", MOVES)
def test_every_install_move_is_valid_python_on_the_same_install(how: str) -> None:
    text = toy_tree(with_field=True).files[WORKER]
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "batch.spec_info = VerifyInput()" in ln)
    out, new_line = move_install(text, WORKER, line, how, 7)
    ast.parse(out)
    assert "spec_info" in out.splitlines()[new_line - 1] and out != text


def test_guard_removal_unguards_getattr_and_hasattr() -> None:
    tree = toy_tree(with_field=True)
    backend = next(p for p in tree.files if p.endswith("toy_backend.py"))
    text = tree.files[backend]
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "hasattr(spec_info" in ln)
    assert "if True:" in remove_guard(text, backend, line, "seq_lens_cpu").splitlines()[line - 1]
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if 'getattr(spec_info, "kv_indptr"' in ln)
    assert "spec_info.kv_indptr is None" in remove_guard(text, backend, line, "kv_indptr").splitlines()[line - 1]


def test_recall_on_the_toy_release_is_complete_with_clean_controls() -> None:
    res = release_recall(CTX, toy_tree(with_field=True))
    json.dumps(res)
    for kind in KINDS:
        k = res["kinds"][kind]
        assert k["mutants"] > 0 and k["recall"] == 1.0 and k["controls_clean"] == k["controls"], (kind, k, res)
    assert res["kinds"]["install moved"]["mutants"] >= len(MOVES) * 3  # three install sites


def test_a_lint_that_stops_following_returns_loses_recall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flow.Program, "_returns_of", lambda self, func, bind, depth: frozenset())
    res = release_recall(CTX, toy_tree(with_field=True))
    moved = res["kinds"]["install moved"]
    assert moved["recall"] < 0.95 and res["kinds"]["field removed"]["recall"] == 1.0
    missed = {m["name"].split(" install ")[1].split(" ")[0] for m in res["misses"]}
    assert {"return", "tuple", "factory"} <= missed and "conditional" not in missed


requires_network = pytest.mark.skipif(
    os.environ.get("WB_NETWORK_TESTS") != "1", reason="network test: needs the release's wheel; WB_NETWORK_TESTS=1"
)


@pytest.mark.network
@requires_network
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", ["0.5.14"])
def test_recall_on_a_real_release(version: str, tmp_path) -> None:
    out = tmp_path / "recall.json"
    assert workbench_main(["upstream", "recall", "--sglang", version, "--json", str(out)]) == 0
    res = json.loads(out.read_text())["releases"][version]
    assert res["mutants"] >= 50 and all(k["recall"] >= 0.95 for k in res["kinds"].values() if k["recall"] is not None)
