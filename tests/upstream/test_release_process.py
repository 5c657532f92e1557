"""The one way into a release's interpreter (``release_process``) and the one supervisor under it
(``workbench.run.supervisor``), on the test interpreter: the process group ended (a child that
ignores SIGTERM, a descendant in a session of its own), the cause kept, the environment recipe,
the result file, and the one import convention of the code that runs inside a release."""

from __future__ import annotations

import ast
import json
import os
import sys
import time
from pathlib import Path

import pytest

from workbench.run.supervisor import Supervisor
from workbench.upstream import release_process as rp

STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # in the same group
{extra}
print("started", flush=True)
time.sleep(300)
"""
OWN_SESSION = 'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)'


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    import psutil

    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


def _start(sup: Supervisor, tmp_path: Path, extra: str = "") -> int:
    log = tmp_path / "out.log"
    with open(log, "w") as f:
        proc = sup.start([sys.executable, "-c", STUBBORN.format(extra=extra)], env=dict(os.environ), stdout=f)
    for _ in range(200):
        if "started" in log.read_text():
            return proc.pid
        time.sleep(0.05)
    raise AssertionError(log.read_text())


def test_the_deadline_ends_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    sup = Supervisor(1.0, grace_s=0.5)
    pid = _start(sup, tmp_path)
    child = _children(pid)
    assert sup.wait() == "deadline"
    assert sup.end() == [] and not any(_alive(p) for p in [pid, *child])
    ended = sup.ended()
    assert (ended.cause, ended.exit_codes, ended.left_running) == ("deadline", [-9], [])


def test_the_first_cause_is_kept(tmp_path: Path) -> None:
    sup = Supervisor(60)
    sup.start([sys.executable, "-c", "pass"], env=dict(os.environ))
    assert sup.wait() == "exited"
    assert sup.stop("deadline") == "exited"
    with Supervisor(60) as watched:
        _start(watched, tmp_path)
        assert watched.wait(lambda: "crashed") == "crashed"
    assert watched.ended_at is not None and watched.left_running == []  # the with block ended it


def test_tree_reaches_a_descendant_in_its_own_session(tmp_path: Path) -> None:
    sup = Supervisor(60, grace_s=0.5, tree=True)
    pid = _start(sup, tmp_path, OWN_SESSION)
    descendants = _children(pid)
    assert len(descendants) == 2
    assert sup.end() == [] and not any(_alive(p) for p in [pid, *descendants])


def test_a_bad_timeout_is_named() -> None:
    with pytest.raises(ValueError, match="bad timeout_s 0; valid: seconds > 0"):
        Supervisor(0)


def test_the_environment_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    monkeypatch.setenv("VIRTUAL_ENV", "/venv")
    monkeypatch.setenv("WB_KEEP", "1")
    env = rp.release_env(tmp_path, {"SGLANG_USE_CPU_ENGINE": "1", "TMPDIR": "/elsewhere"})
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env and env["WB_KEEP"] == "1"
    assert env["TMPDIR"] == str(tmp_path) and env["TRITON_INTERPRET"] == "1" and env["SGLANG_USE_CPU_ENGINE"] == "1"


def test_a_bad_target_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad target 'runtime.nope'; valid: a module under"):
        rp.command(sys.executable, "runtime.nope", tmp_path / "c.json")


def test_every_launch_target_names_a_module(tmp_path: Path) -> None:
    """Each in-release entry point the workbench starts resolves (a module renamed under its launcher fails here,
    not in the first network run)."""
    from workbench.upstream.replay import driver
    from workbench.upstream.runtime import kernel, release_launch, release_run

    targets = (driver.TARGET, kernel.TARGET, release_launch.TARGET, release_run.REFERENCE_TARGET)
    for target in targets:
        assert target in " ".join(rp.command(sys.executable, target, tmp_path / "c.json"))


SCRIPT = """
import json, os, sys
cfg = json.load(open(sys.argv[1]))
with open(cfg["result_path"], "w") as f:
    json.dump({"path0": sys.path[0], "isolated": sys.flags.isolated, "tmpdir": os.environ["TMPDIR"],
               "cwd": os.getcwd(), "argv0": sys.argv[0], "x": cfg["x"]}, f)
sys.exit(cfg["rc"])
"""


def test_a_script_runs_isolated_in_its_own_folder_and_answers_in_its_result_file(tmp_path: Path) -> None:
    script = tmp_path / "repro.py"
    script.write_text(SCRIPT)
    run = rp.run_in_release(sys.executable, str(script), {"x": 7, "rc": 1}, 60, paths=[str(tmp_path / "src")])
    assert run.result is not None, run.output
    assert (run.cause, run.exit_code, run.left_running, run.timed_out) == ("exited", 1, [], False)
    got = run.result
    assert (got["path0"], got["isolated"], got["x"], got["argv0"]) == (str(tmp_path / "src"), 1, 7, str(script))
    assert got["tmpdir"] == got["cwd"] and not Path(got["cwd"]).exists()  # the run's own folder, removed


def test_a_run_past_its_deadline_and_one_that_cannot_start(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(300)\n")
    run = rp.run_in_release(sys.executable, str(script), {}, 1)
    assert (run.result, run.cause, run.timed_out, run.left_running) == (None, "deadline", True, [])
    run = rp.run_in_release(tmp_path / "no-python", str(script), {}, 5)
    assert run.cause == "could not start" and "could not start" in run.output


def _relative_imports(path: Path) -> list[tuple[Path, ast.AST]]:
    """(file, node) of every relative import in ``path`` that resolves to a module file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            parts = node.module.split(".") if node.module else []
            names = [parts] if parts else [[a.name] for a in node.names]
            if parts:
                names += [parts + [a.name] for a in node.names]
            for p in names:
                f = base.joinpath(*p).with_suffix(".py")
                if f.is_file():
                    out.append((f, node))
    return out


IN_RELEASE_TARGETS = (
    "replay/wb_driver/main.py",
    "runtime/release_rank.py",
    "runtime/reference.py",
    "runtime/release_kernel.py",
)


def in_release_files() -> set[Path]:
    """Every file the in-release entry points reach by their relative imports (the code run inside a release)."""
    todo = [rp.UPSTREAM / t for t in IN_RELEASE_TARGETS]
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo += [g for g, _ in _relative_imports(f)]
    return seen


def test_in_release_code_has_one_import_convention() -> None:
    """Relative imports only: no ``workbench`` import, no sys.path edit, no sibling fallback
    (``except ImportError`` around an import of our own code); the stub system is one package."""
    files = in_release_files()
    assert rp.UPSTREAM / "in_release" / "shims.py" in files and rp.UPSTREAM / "in_release" / "stubs.py" in files
    bad, path_edits = [], set()
    for f in sorted(files):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(n.split(".")[0] == "workbench" for n in names):
                    bad.append(f"{f.name}:{node.lineno} imports workbench")
            if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers
            ):
                ours = [n for n in ast.walk(ast.Module(node.body, [])) if isinstance(n, ast.ImportFrom) and n.level]
                if ours:
                    bad.append(f"{f.name}:{node.lineno} falls back around a relative import")
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                path_edits.add(f.name)
    assert bad == []
    # the release kernel appends the workbench's folder for the notebook's own imports: the one exception
    assert path_edits == {"release_kernel.py"}


def test_the_boot_registers_the_alias_and_runs_main(tmp_path: Path) -> None:
    """The driver under the test interpreter: the boot's alias packages, the config at argv[1], the
    result file (the test interpreter has no sglang: the driver names the missing import)."""
    cfg = {"cases": []}
    run = rp.run_in_release(sys.executable, "replay.wb_driver.main", cfg, 120, name="replay")
    if run.result and run.result["status"] != "error":
        pytest.skip("sglang is importable in the test interpreter")
    assert run.result is not None, run.output
    assert (run.result["stage"], run.result["missing"]) == ("import", "sglang")
    assert json.dumps(run.result)  # plain JSON


def test_the_release_kernel_gets_the_ranks_environment_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The kernelspec ``workbench upstream kernel`` writes: ``release_process``'s command and the same
    settings a real-runtime rank gets (``release_settings`` with ``runtime_settings``), less the ranks'
    thread binding, its ``TMPDIR`` in the kernelspec's folder; nothing of the caller's environment."""
    from workbench.upstream.runtime.kernel import TARGET, kernel_spec
    from workbench.upstream.runtime.release_run import runtime_settings

    monkeypatch.setenv("WB_SECRET_OF_THE_CALLER", "x")
    py, src, tree = tmp_path / "venv/bin/python", tmp_path / "src", tmp_path / "spec_tree.py"
    spec = kernel_spec("0.5.14", None, py, src, tmp_path / "venv", tree, tmp_path / "sglang-0.5.14")
    rank = rp.release_env(tmp_path / "run", runtime_settings(tree, 2))
    env = spec["env"]
    assert spec["argv"] == [*rp.command(py, TARGET, "-f", [str(src)]), "{connection_file}"]
    assert spec["argv"][1:3] == ["-I", "-u"]  # isolated: PYTHONPATH and the other PYTHON* variables are ignored
    shared = set(rank) & set(env) - {"TMPDIR"}
    assert {"TRITON_INTERPRET", "TOKENIZERS_PARALLELISM", "SGLANG_USE_CPU_ENGINE", "TORCH_COMPILE_DISABLE"} <= shared
    assert "WB_SPEC_TREE_SRC" in shared and {k: env[k] for k in shared} == {k: rank[k] for k in shared}
    assert env["TMPDIR"] == str(tmp_path / "sglang-0.5.14" / "tmp") and env["WB_SGLANG_SRC"] == str(src)
    assert "SGLANG_CPU_OMP_THREADS_BIND" in rank and "SGLANG_CPU_OMP_THREADS_BIND" not in env
    assert "WB_SECRET_OF_THE_CALLER" in rank and "WB_SECRET_OF_THE_CALLER" not in env
