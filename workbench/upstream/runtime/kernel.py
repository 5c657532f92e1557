"""Jupyter kernels bound to a release's environment: ``workbench upstream kernel --sglang V``.

The kernelspec runs ``release_kernel.py`` with the release's cached dependency venv (the
environments cache stays the one copy: nothing is copied) through ``release_process``'s boot (the
release's or a checkout's sources first on the path) and its environment recipe (``release_settings``
with ``release_run.runtime_settings``), with the real runtime's CPU shims, so a
crash bundle of ``workbench upstream
run`` replays there in the release's own code (``workbench.debug.sglang_replay``). ipykernel is
added to that venv in place when it lacks it. ``metadata.debugger`` lets JupyterLab's visual
debugger attach. Removing deletes only a kernelspec this module wrote (``metadata.workbench``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from workbench.upstream.context import UpstreamContext
from workbench.upstream.sources.envs import add_packages, ensure_env, ensure_sources
from workbench.upstream.sources.releases import check_version, known_releases
from workbench.upstream.sources.trees import source_root

from ..release_process import command, release_settings
from .release_run import TREE_KERNELS_FILE, TREE_KERNELS_RELEASE, runtime_settings

HERE = Path(__file__).resolve().parent
WORKBENCH_ROOT = HERE.parents[2]  # the folder holding workbench/
TARGET = "runtime.release_kernel"
IPYKERNEL = "ipykernel==7.4.0"  # as constraints.txt pins it for the workbench's own venv


class KernelError(ValueError):
    """A kernelspec that is not the workbench's, or none where one was to be removed."""


def kernels_dir() -> Path:
    """Jupyter's user kernelspec folder (``$JUPYTER_DATA_DIR/kernels`` when set)."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "kernels"


def kernel_name(version: str, sglang_src: Path | None = None) -> str:
    """``sglang-<version>``, or ``sglang-<version>-src-<hash of the checkout's path>``."""
    if sglang_src is None:
        return f"sglang-{version}"
    digest = hashlib.sha256(str(Path(sglang_src).resolve()).encode()).hexdigest()[:8]
    return f"sglang-{version}-src-{digest}"


def kernel_spec(
    version: str,
    src: Path | None,
    python: Path,
    src_root: Path,
    venv: Path,
    tree_src: Path,
    folder: Path,
) -> dict:
    """The kernelspec (``kernel.json``) of ``version`` (or the checkout ``src``) in the kernelspec folder
    ``folder``: ``release_process``'s command and environment recipe (``release_settings`` with the
    runtime's settings; ``TMPDIR`` is ``folder/tmp``: torch's torchinductor_<user> and the debugger's cell
    files stay with the kernelspec, not in /tmp)."""
    own = {
        "WB_SGLANG_VERSION": version,
        "WB_SGLANG_SRC": str(src_root),
        "WB_WORKBENCH_ROOT": str(WORKBENCH_ROOT),
        "WB_WORKBENCH_PYTHON": sys.executable,  # the workbench's own Python, for `workbench upstream run`
    }
    return {
        "argv": command(python, TARGET, "-f", [str(src_root)]) + ["{connection_file}"],
        "display_name": f"SGLang {version}{' checkout ' + str(src) if src else ''} (workbench CPU runtime)",
        "language": "python",
        "env": release_settings(folder / "tmp", {**runtime_settings(tree_src), **own}),
        "interrupt_mode": "signal",
        "metadata": {
            "debugger": True,
            "workbench": {"sglang": version, "sglang_src": str(src) if src else None, "venv": str(venv)},
        },
    }


def register(ctx: UpstreamContext, version: str, sglang_src: Path | str | None = None) -> dict:
    """Write the kernelspec of ``version`` (or the checkout on its environment); returns its facts.
    Raises ReleaseError / SourceError for bad arguments, EnvBuildError when the environment cannot
    be built or ipykernel cannot be added."""
    src = Path(sglang_src) if sglang_src is not None else None
    check_version(version, known_releases(ctx))
    root = source_root(src) if src is not None else None  # SourceError names the folder
    env = ensure_env(ctx, version, src_root=root)
    added = add_packages(ctx, env, [IPYKERNEL])
    tree_src = ensure_sources(ctx, TREE_KERNELS_RELEASE) / TREE_KERNELS_FILE
    name = kernel_name(version, src)
    folder = kernels_dir() / name
    spec = kernel_spec(version, src, env.python, env.src_root, env.root, tree_src, folder)
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1))
    return {"name": name, "path": str(folder), "python": str(env.python), "src_root": str(env.src_root), "added": added}


def remove(version: str, sglang_src: Path | str | None = None) -> str:
    """Delete the workbench's kernelspec of ``version`` (or the checkout); returns its folder."""
    folder = kernels_dir() / kernel_name(version, Path(sglang_src) if sglang_src is not None else None)
    spec = folder / "kernel.json"
    if not spec.is_file():
        raise KernelError(f"no kernelspec {folder.name!r} in {folder.parent}")
    if "workbench" not in json.loads(spec.read_text()).get("metadata", {}):
        raise KernelError(f"kernelspec {folder} was not written by the workbench (no metadata.workbench); left alone")
    shutil.rmtree(folder)
    return str(folder)
