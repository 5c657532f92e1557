"""The mutant pool: many edited trees replayed in one interpreter, one forked child per job, each
job's edited files served in place of the release's under the release's own paths.

The "release" here is a toy `sglang` package run by the workbench's own interpreter: the driver's
set-up imports `sglang.srt.distributed.parallel_state` first, and the toy's module raises there with
a value it imports from `forward_batch_info` (which the pool's parent loads before it forks), so each
job's answer says which source of that module the child saw."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.replay import oracle_pool
from workbench.upstream.sources.trees import SourceTree

PS = "sglang/srt/distributed/parallel_state.py"
FB = "sglang/srt/model_executor/forward_batch_info.py"  # in forks.PRELOAD_SGLANG: loaded by the parent


def _release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SourceTree:
    root = tmp_path / "src"
    for pkg in ("sglang", "sglang/srt", "sglang/srt/distributed", "sglang/srt/model_executor"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    (root / FB).write_text('VALUE = "release copy"\n')
    (root / PS).write_text(
        "from sglang.srt.model_executor.forward_batch_info import VALUE\n"
        'raise RuntimeError(VALUE + " seen by " + __file__)\n'
    )
    env = SimpleNamespace(python=Path(sys.executable), src_root=root)
    monkeypatch.setattr(oracle_pool, "ensure_env", lambda ctx, version: env)
    return SourceTree("sglang 0.5.14", {p: (root / p).read_text() for p in (PS, FB)}, "0.5.14", root=root)


def test_each_job_imports_its_own_edited_files_under_the_release_paths(tmp_path, monkeypatch) -> None:
    tree = _release(tmp_path, monkeypatch)
    jobs = [
        ("edited", {FB: 'VALUE = "edited copy"\n'}, []),
        ("as shipped", {}, []),
        ("hangs", {PS: "import time\ntime.sleep(60)\n"}, []),
        ("after a hang", {}, []),
    ]
    got = oracle_pool.replay_mutants(UpstreamContext(log=quiet), tree, jobs, job_limit_s=10)
    path = str(tree.root / PS)
    # the parent had loaded forward_batch_info: the child dropped it and imported the edited text
    assert (
        got["edited"]["status"] == "error" and got["edited"]["message"] == f"RuntimeError: edited copy seen by {path}"
    )
    assert got["as shipped"]["message"] == f"RuntimeError: release copy seen by {path}"
    assert got["hangs"]["status"] == "timeout" and "deadline" in got["hangs"]["message"]
    assert got["after a hang"]["message"] == f"RuntimeError: release copy seen by {path}"
    # the edited source was compiled in memory: the bytecode next to the release's file is the release's
    cached = list((tree.root / "sglang/srt/model_executor").glob("__pycache__/forward_batch_info*"))
    assert cached and all(b"edited copy" not in p.read_bytes() for p in cached)


def test_a_child_drops_the_modules_that_import_an_edited_one_when_imported(tmp_path) -> None:
    from workbench.upstream.replay.wb_driver import forks

    graph = {
        "sglang": {"sglang.srt.a"},  # a package: kept, its names as bound
        "sglang.srt.a": {"sglang.srt.b"},
        "sglang.srt.b": set(),
        "sglang.srt.c": set(),  # imports b inside a function only: not an edge
        "sglang.srt.d": {"sglang.srt.a"},
    }
    loaded = dict.fromkeys(graph)
    assert forks.dependents(loaded, {"sglang.srt.b"}, graph) == {
        "sglang",
        "sglang.srt.a",
        "sglang.srt.b",
        "sglang.srt.d",
    }
    assert forks.dependents(loaded, {"sglang.srt.c"}, graph) == {"sglang.srt.c"}
    src = (
        "from __future__ import annotations\nimport os\nfrom . import b\nfrom .x import y as z\n"
        "if True:\n    from sglang.srt import e\n"
        "def f():\n    from sglang.srt import c\n"
        "class K:\n    from ..srt import g\n"
    )
    mod = SimpleNamespace(__file__=None)
    assert forks.imports_of("sglang.srt.a", mod) == set()  # no source file: nothing known
    path = tmp_path / "a.py"
    path.write_text(src)
    mod.__file__ = str(path)
    assert forks.imports_of("sglang.srt.a", mod) == {
        "sglang.srt",
        "sglang.srt.b",
        "sglang.srt.x",
        "sglang.srt.x.y",
        "sglang.srt.e",
        "sglang.srt.g",
    }


def test_only_a_release_tree_is_pooled(tmp_path) -> None:
    with pytest.raises(ValueError, match="release's own tree"):
        oracle_pool.replay_mutants(UpstreamContext(log=quiet), SourceTree("checkout x", {}, None), [], 1)
