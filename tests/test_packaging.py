"""The installed top-level names are the project's own: a non-editable wheel built from this checkout holds
`workbench`, `workbench_ci` and `workbench_kernels` (the ci/ and kernels/ folders, through the links of those
names in the repository root), nothing named `ci` or `kernels`, and its modules import from the wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAMES = {"workbench", "workbench_ci", "workbench_kernels"}
LINKS = {"workbench_ci": "ci", "workbench_kernels": "kernels"}
SKIP = {".venv", ".git", "artifacts", "build", "runs", ".cache", ".ruff_cache", ".pytest_cache"}


def test_the_import_names_are_links_to_the_folders() -> None:
    for name, folder in LINKS.items():
        link = ROOT / name
        assert link.is_symlink() and os.readlink(link) == folder, f"{link} must be a link to {folder}/"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from a copy of this checkout (the build writes build/ and *.egg-info beside the
    sources: a copy keeps them out of the checkout the other tests read)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for p in ROOT.iterdir():
        if p.name not in SKIP and not p.name.endswith(".egg-info"):
            if p.is_symlink():
                (src / p.name).symlink_to(os.readlink(p))
            else:
                shutil.copytree(p, src / p.name, symlinks=True) if p.is_dir() else shutil.copy2(p, src / p.name)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    [whl] = tmp.glob("eagle_workbench-*.whl")
    return whl


def test_the_wheel_installs_only_the_projects_names(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        [dist] = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        top_level = set(z.read(f"{dist}/top_level.txt").decode().split())
        scripts = z.read(f"{dist}/entry_points.txt").decode()
    assert tops == NAMES and top_level == NAMES, (tops, top_level)
    for name, folder in LINKS.items():  # the folders' files, all of them, under the import names
        want = {f"{name}/{p.relative_to(ROOT / folder)}" for p in (ROOT / folder).rglob("*.py")}
        assert want and want <= set(names), sorted(want - set(names))
    assert "workbench-nightly = workbench_ci.nightly:main" in scripts, scripts


def test_the_wheels_modules_import_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    """Unpacked first on sys.path, outside the checkout: the entry points' modules load from the wheel, the
    Triton kernels set up from it, and `python -m workbench_ci.nightly --help` runs."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")} | {"PYTHONPATH": str(site)}
    code = (
        "import json, workbench_kernels, workbench_ci.nightly, workbench_ci.pytest_shard, workbench.cli\n"
        "workbench_kernels.setup()\n"
        "from workbench_kernels import decode_attention\n"
        "mods = (workbench_kernels, workbench_ci.nightly, workbench_ci.pytest_shard, workbench.cli, decode_attention)\n"
        "print(json.dumps([m.__file__ for m in mods]))"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    files = json.loads(res.stdout.splitlines()[-1])
    assert all(Path(f).is_relative_to(site) for f in files), files
    res = subprocess.run(
        [sys.executable, "-m", "workbench_ci.nightly", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0 and "usage: python -m workbench_ci.nightly" in res.stdout, res.stderr[-3000:]


def test_no_code_imports_the_folders_by_their_own_names() -> None:
    """`import ci` / `import kernels` work only from the repository root (the folders are on sys.path there):
    installed, those names are not there. Every import uses workbench_ci and workbench_kernels."""
    import ast

    bad = []
    tops = ("workbench", "ci", "kernels", "tests", "benchmarks", "scripts", "notebooks")
    for path in sorted(p for top in tops for p in (ROOT / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                mods = [node.module or ""]
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in mods if m.split(".")[0] in LINKS.values()]
    assert not bad, bad
