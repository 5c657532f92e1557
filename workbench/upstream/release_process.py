"""The one way into a release's interpreter: every piece of workbench code that runs inside a release's
release environment (the replay driver, the reproducers, the runtime ranks, the HF reference) is
started here.

- **Command** (``command``): ``python -I -u -c BOOT UPSTREAM TARGET PATHS CONFIG``. ``-I``: no user
  site, no ``PYTHON*`` variables, no script folder on ``sys.path``; ``-u``: unbuffered output (a
  rank's log is whole when it is killed). ``BOOT`` puts ``PATHS`` (the release's or a checkout's
  sources) first on ``sys.path``, then runs ``TARGET``: a dotted module under ``workbench/upstream``
  (its ``main()``, read as the package ``wb_upstream`` whose parent packages are registered empty,
  so in-release code imports its siblings by ordinary relative imports and imports nothing of the
  workbench's own ``__init__`` files), or a ``.py`` file (a reproducer) run as ``__main__``.
- **Environment** (``release_env``): the caller's variables without ``SCRUBBED``, then
  ``release_settings``: ``SETTINGS``, the caller's own (the runtime's SGLang settings,
  ``runtime.release_run.runtime_settings``) and ``TMPDIR`` set to the run's own folder (what the
  release writes there, torch's ``torchinductor_<user>``, goes with the folder). The release kernel's
  kernelspec writes the same ``release_settings`` (Jupyter adds them to its own environment; ``-I``
  keeps the ``PYTHON*`` variables out).
- **Result channel**: one result file. The config the process gets (``CONFIG``) names it as
  ``result_path``; the in-release code writes its JSON there (``in_release.result_channel.write``), once,
  atomically. Nothing is read from stdout.
- **Supervisor**: ``workbench.run.supervisor.Supervisor``: own process group, a deadline, terminate
  then kill, the cause kept (``exited``, ``deadline``, or the caller's word).

``run_in_release`` is one process, start to end; ``start_in_release`` starts one of several (the
runtime's ranks, ``runtime.launch``) under the caller's supervisor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.run.supervisor import Supervisor

UPSTREAM = Path(__file__).resolve().parent
ALIAS = "wb_upstream"  # the name workbench/upstream has inside a release's interpreter
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
SETTINGS = {
    "TRITON_INTERPRET": "1",  # the release's Triton kernels run in Triton's interpreter on CPU tensors
    "TOKENIZERS_PARALLELISM": "false",
}
# Registers the package ``dotted`` (under workbench/upstream) and its parents as empty packages named
# under ALIAS: their __init__ files do not run; the modules in them import by relative imports.
REGISTER = (
    "def wb_register(up, dotted):\n"
    "    import os, sys, types\n"
    f"    parts = [{ALIAS!r}] + [p for p in dotted.split('.') if p]\n"
    "    for i in range(1, len(parts) + 1):\n"
    "        pkg = types.ModuleType('.'.join(parts[:i]))\n"
    "        pkg.__path__ = [os.path.join(up, *parts[1:i])]\n"
    "        sys.modules.setdefault(pkg.__name__, pkg)\n"
)
BOOT = REGISTER + (
    "import importlib, os, runpy, sys\n"
    "up, target, paths = sys.argv[1:4]\n"
    "del sys.argv[1:4]\n"
    "sys.argv[0] = target\n"
    "sys.path[:0] = [p for p in paths.split(os.pathsep) if p]\n"
    "if target.endswith('.py'):\n"
    "    runpy.run_path(target, run_name='__main__')\n"
    "else:\n"
    "    wb_register(up, target.rpartition('.')[0])\n"
    f"    importlib.import_module({ALIAS!r} + '.' + target).main()\n"
)
TAIL_CHARS = 4000


def release_settings(run_dir: Path | str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What the recipe sets: ``SETTINGS``, the caller's ``extra``, ``TMPDIR`` = ``run_dir`` (all that a
    kernelspec, which can only set variables, writes)."""
    return {**SETTINGS, **(extra or {}), "TMPDIR": str(run_dir)}


def release_env(run_dir: Path | str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process in a release: the caller's without ``SCRUBBED``, then ``release_settings``."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(release_settings(run_dir, extra))
    return env


def command(python: Path | str, target: str, config: Path | str, paths: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The command line that runs ``target`` (a dotted module under ``workbench/upstream`` or a .py file)."""
    if not target.endswith(".py") and not (UPSTREAM / (target.replace(".", "/") + ".py")).is_file():
        raise ValueError(f"bad target {target!r}; valid: a module under {UPSTREAM} or a .py file")
    return [str(python), "-I", "-u", "-c", BOOT, str(UPSTREAM), target, os.pathsep.join(map(str, paths)), str(config)]


def write_config(run_dir: Path, name: str, config: dict) -> Path:
    """``run_dir/<name>.json``: ``config`` with its ``result_path`` (``run_dir/<name>.result.json``) set."""
    path = run_dir / f"{name}.json"
    path.write_text(json.dumps({**config, "result_path": str(run_dir / f"{name}.result.json")}))
    return path


def start_in_release(
    sup: Supervisor,
    python: Path | str,
    target: str,
    config_path: Path,
    env: dict[str, str],
    log_path: Path,
    paths: list[str] | tuple[str, ...] = (),
) -> subprocess.Popen:
    """Start ``target`` on ``config_path`` under ``sup``, stdout and stderr to ``log_path``; the Popen."""
    with open(log_path, "w") as log:
        return sup.start(command(python, target, config_path, paths), env=env, cwd=config_path.parent, stdout=log)


@dataclass
class ReleaseRun:
    """One process in a release: its result file's JSON (None if it wrote none or an unreadable one),
    how it ended (``Supervisor`` causes, or ``could not start``), its exit code, its output's tail."""

    result: dict | None
    cause: str
    exit_code: int | None
    output: str
    wall_s: float
    left_running: list[int]

    @property
    def timed_out(self) -> bool:
        return self.cause == "deadline"


def read_result(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when there is none (missing, partial, not an object)."""
    try:
        got = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def run_in_release(
    python: Path | str,
    target: str,
    config: dict,
    timeout_s: float,
    paths: list[str] | tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    run_dir: Path | None = None,
    name: str = "run",
) -> ReleaseRun:
    """Run ``target`` on ``config`` in a release's interpreter ``python``, in ``run_dir`` (default: a new
    temporary folder, removed after), under ``timeout_s``; never raises for the process's failures."""
    t0 = time.monotonic()
    own = run_dir is None
    folder = Path(tempfile.mkdtemp(prefix="wb-release-")) if own else Path(run_dir)
    try:
        cfg_path = write_config(folder, name, config)
        log_path = folder / f"{name}.log"
        with Supervisor(timeout_s) as sup:
            try:
                proc = start_in_release(sup, python, target, cfg_path, release_env(folder, extra_env), log_path, paths)
            except OSError as exc:
                return ReleaseRun(None, "could not start", None, f"could not start {python}: {exc}", 0.0, [])
            cause = sup.wait(lambda: None)
            left = sup.end()
        output = log_path.read_text(errors="replace")[-TAIL_CHARS:] if log_path.exists() else ""
        result = read_result(folder / f"{name}.result.json")
        return ReleaseRun(result, cause, proc.returncode, output, round(time.monotonic() - t0, 2), left)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
