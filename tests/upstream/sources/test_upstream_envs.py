"""The replay environments' builds with uv, offline: one store hard-linked into every venv, pip's
configured indexes carried over, and a package uv cannot find reported as EnvBuildError naming it.
(The real builds, torch and the release's imports from the registries, run in the network tests.)"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.sources.envs import (
    TORCH_PIN,
    TRITON_PIN,
    UV_STORE,
    EnvBuildError,
    make_venv,
    pin_mismatch,
    pip_index_args,
    torch_args,
    uv_install,
    uv_install_command,
)


def _wheel(folder: Path, name: str = "wbtiny", version: str = "1.0") -> Path:
    """A minimal pure-Python wheel: one module and its dist-info."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for n, text in {**files, f"{info}/RECORD": record}.items():
            zf.writestr(n, text)
    return path


def _site(python: Path) -> Path:
    return next((python.parent.parent / "lib").glob("python3*/site-packages"))


def test_two_venvs_share_one_stored_copy_by_hard_links(tmp_path: Path) -> None:
    ctx = UpstreamContext(cache_dir=tmp_path / "cache", log=quiet)
    wheels = _wheel(tmp_path / "wheels").parent
    pythons = [make_venv(ctx.cache_dir / f"deps-{i}") for i in (1, 2)]
    for python in pythons:
        uv_install(
            ctx, python, ["--offline", "--no-index", "--find-links", str(wheels), "wbtiny==1.0"], "imports", "[t]"
        )
    one, two = (_site(p) / "wbtiny" / "__init__.py" for p in pythons)
    assert one.read_text() == "VALUE = 42\n"
    assert one.stat().st_ino == two.stat().st_ino  # the same file, not two copies
    assert one.stat().st_nlink >= 3  # the store's copy and the two venvs'
    stored = [p for p in (ctx.cache_dir / UV_STORE).rglob("wbtiny/__init__.py")]
    assert [p.stat().st_ino for p in stored] == [one.stat().st_ino]


def test_a_package_uv_cannot_find_is_an_env_build_error_naming_it(tmp_path: Path) -> None:
    ctx = UpstreamContext(cache_dir=tmp_path / "cache", log=quiet)
    python = make_venv(tmp_path / "venv")
    with pytest.raises(EnvBuildError) as err:
        uv_install(ctx, python, ["--offline", "--no-index", "gguf==9.9"], "imports", "[t]")
    assert (err.value.step, err.value.missing) == ("imports", "gguf==9.9")
    assert "gguf" in err.value.detail
    wheels = _wheel(tmp_path / "wheels").parent
    with pytest.raises(EnvBuildError) as err:  # the package exists, the pinned version does not
        uv_install(
            ctx, python, ["--offline", "--no-index", "--find-links", str(wheels), "wbtiny==9.9"], "imports", "[t]"
        )
    assert err.value.missing == "wbtiny==9.9"


def test_pips_configured_indexes_go_to_uv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no config files: only the PIP_* variables below
    for name in ("PIP_CONSTRAINT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    assert pip_index_args() == []
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///a/simple file:///b/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    assert pip_index_args() == [
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///a/simple",
        "--extra-index-url",
        "file:///b/simple",
        "--find-links",
        "/opt/wheels",
    ]
    ctx = UpstreamContext(cache_dir=tmp_path, log=quiet)
    cmd = uv_install_command(ctx, tmp_path / "bin" / "python", ["numpy"])
    assert cmd[cmd.index("--cache-dir") + 1] == str(tmp_path / UV_STORE)
    assert cmd[cmd.index("--link-mode") + 1] == "hardlink"
    assert "https://mirror.example/simple" in cmd and cmd[-1] == "numpy"
    # $TORCH_INDEX's --index-url replaces the configured index; the extra indexes and find-links stay
    monkeypatch.setenv("TORCH_INDEX", "https://download.pytorch.org/whl/cpu")
    cmd = uv_install_command(ctx, tmp_path / "bin" / "python", torch_args())
    assert cmd.count("--index-url") == 1 and "https://mirror.example/simple" not in cmd
    assert cmd[cmd.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    assert "file:///b/simple" in cmd and "/opt/wheels" in cmd and "--no-deps" in cmd


def test_a_cached_venv_with_another_torch_or_triton_is_rebuilt_not_reused() -> None:
    torch_v, triton_v = TORCH_PIN.split("==")[1], TRITON_PIN.split("==")[1]
    assert pin_mismatch({"packages": {"torch": f"{torch_v}+cpu", "triton": triton_v}}) is None
    assert pin_mismatch({"packages": {"torch": "2.0.1", "triton": triton_v}}) == f"torch 2.0.1, not {torch_v}"
    assert pin_mismatch({"packages": {"torch": torch_v, "triton": None}}) == f"triton missing, not {triton_v}"
    assert pin_mismatch({}) == f"torch missing, not {torch_v}"
