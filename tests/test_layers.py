"""The package reads bottom-up (``tests/import_graph.py`` reads the imports): a module imports only
its own layer and the layers below it, no import cycle, nothing outside the views renders, and an
import inside a function says why."""

from __future__ import annotations

import ast
import sys

from import_graph import (
    LAYERS,
    RENDERERS_ABOVE_VIEWS,
    ROOT,
    function_level_imports,
    import_cycles,
    import_graph,
    in_release_imports,
    in_release_modules,
    layer_of,
    module_name,
    project_files,
    reason_of,
    rendering,
    string_imports,
    unresolved_imports,
    upward_imports,
)


def test_every_internal_import_resolves():
    assert unresolved_imports(ROOT) == []


def test_every_project_module_has_a_layer():
    assert [m for m in import_graph(ROOT) if layer_of(m) < 0] == []


def test_nothing_imports_upward():
    assert upward_imports(ROOT) == []


def test_no_import_cycle():
    """On the same graph (function-level imports included): no two modules import each other, however far round."""
    assert import_cycles(import_graph(ROOT)) == []


def test_the_cycle_check_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert sorted(map(sorted, import_cycles(graph))) == [["a", "b", "c"], ["e"]]


def test_function_level_imports_carry_a_reason():
    """An internal import inside a function says why it is not at the top of its module."""
    missing = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in project_files(ROOT)
        for node, _, holder, lines in function_level_imports(path, ROOT)
        if reason_of(node, lines, holder) is None
    ]
    assert missing == []


def test_the_reason_check_reads_comments(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "def a():\n    import workbench.run  # the run loads torch\n"
        "def b():\n    # only when replaying\n    from workbench import debug\n    import workbench.run\n"
        "def c():  # loads on first use\n    import workbench.run\n"
        "def d():\n    import workbench.run\n"
    )
    lines = src.read_text().splitlines()
    tree = ast.parse(src.read_text())
    fns = {f.name: f for f in tree.body}
    got = {
        name: [reason_of(n, lines, f) for n in f.body if isinstance(n, ast.Import | ast.ImportFrom)]
        for name, f in fns.items()
    }
    assert got == {
        "a": ["the run loads torch"],
        "b": ["only when replaying", "only when replaying"],
        "c": ["loads on first use"],
        "d": [None],
    }


def test_nothing_outside_views_renders():
    """Below the views and in the faces (which only call views): no plotting, highlighting, progress
    bar or notebook display library, and no HTML markup."""
    views = next(i for i, (name, _) in enumerate(LAYERS) if name == "views")
    found = [
        hit
        for path in project_files(ROOT)
        if layer_of(module_name(path, ROOT)) != views
        and module_name(path, ROOT).split(".")[0] not in RENDERERS_ABOVE_VIEWS
        for hit in rendering(path, ROOT)
    ]
    assert found == []


def test_the_render_check_sees_markup_and_plots(tmp_path):
    (tmp_path / "m.py").write_text(
        "import html\nfrom matplotlib.figure import Figure\n"
        "def f(x):\n    import tqdm.auto\n    return f'<td style=\"x\">{html.escape(x)}</td>'\n"
        "PLACEHOLDER = 'rank<R>.log <run id> <p'\n"
    )
    assert rendering(tmp_path / "m.py", tmp_path) == [
        "m.py:2 imports matplotlib.figure",
        "m.py:4 imports tqdm.auto",
        "m.py:5 writes HTML '<td style=\"x\">'",
    ]


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The scanner itself: a runtime import counts (relative ones too), a TYPE_CHECKING one does not."""
    pkg = tmp_path / "workbench" / "models"
    pkg.mkdir(parents=True)
    (tmp_path / "workbench" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (tmp_path / "workbench" / "run").mkdir()
    (tmp_path / "workbench" / "run" / "__init__.py").write_text("")
    (tmp_path / "workbench" / "run" / "api.py").write_text("")
    (pkg / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import workbench.run\n"
        "def f():\n    from ..run import api\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward_imports(tmp_path) == ["workbench/models/bad.py:5 imports workbench.run.api"]


def test_the_registries_string_imports_are_in_the_graph():
    """The backend registry names its modules as strings: the graph holds them as imports."""
    graph = import_graph(ROOT)
    assert {"workbench.backends.triton", "workbench.backends.torch_native"} <= graph["workbench.backends"]


def test_code_run_inside_a_release_imports_no_workbench_module():
    inside = in_release_modules(ROOT)
    assert {
        "workbench.upstream.replay.wb_driver.main",
        "workbench.upstream.runtime.release_rank",
        "workbench.upstream.in_release.shims",
    } <= inside
    assert "workbench.upstream.runtime.release_run" not in inside
    assert in_release_imports(ROOT) == []


def test_the_checks_see_string_and_in_release_imports(tmp_path, monkeypatch):
    """The scanner itself: a registry string, import_module's argument and a "mod:attr" entry count as
    imports (an upward one is reported); a JUnit class name does not, nor a `-m` launch in the graph; a
    sibling of in-release code importing the workbench is reported."""
    for pkg in ("workbench", "workbench/models", "workbench/run", "workbench/upstream", "workbench/upstream/runtime"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "workbench/run/api.py").write_text("")
    (tmp_path / "workbench/models/reg.py").write_text(
        'import importlib\nREG = {"a": ("workbench.run.api", "Api")}\n'
        'def f():\n    return importlib.import_module("workbench.run")\n'
        'ENTRY = "workbench.run.api:reproduce"\nNAME = dict(classname="workbench.run")\n'
        'CMD = ["python", "-m", "workbench.run.api"]\n'
    )
    runtime = tmp_path / "workbench/upstream/runtime"
    (runtime / "toy_rank.py").write_text('"""Runs inside the release\'s environment."""\nimport toy_shims\n')
    (runtime / "toy_shims.py").write_text('"""CPU shims."""\nfrom workbench.run import api\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = sorted(t for _, t in string_imports(tmp_path / "workbench/models/reg.py", tmp_path))
    assert found == ["workbench.run", "workbench.run.api", "workbench.run.api", "workbench.run.api"]
    assert sorted(upward_imports(tmp_path)) == [
        "workbench/models/reg.py:2 imports workbench.run.api",
        "workbench/models/reg.py:4 imports workbench.run",
        "workbench/models/reg.py:5 imports workbench.run.api",
        "workbench/models/reg.py:7 imports workbench.run.api",
    ]
    assert import_graph(tmp_path)["workbench.models.reg"] == {"workbench.run", "workbench.run.api"}
    assert in_release_modules(tmp_path) == {
        "workbench.upstream.runtime.toy_rank",
        "workbench.upstream.runtime.toy_shims",
    }
    assert in_release_imports(tmp_path) == ["workbench/upstream/runtime/toy_shims.py:2 imports workbench.run.api"]
