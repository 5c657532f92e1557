"""Sources of the upstream guard: the context, release versions, source trees, environment pins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from upstream_fixtures import KNOWN, write_fake_cache

from workbench.cli import main as workbench_main
from workbench.upstream.context import UpstreamContext, quiet
from workbench.upstream.sources.envs import dependency_specs
from workbench.upstream.sources.releases import ReleaseError, check_version, check_versions, version_key
from workbench.upstream.sources.standin import write_standin
from workbench.upstream.sources.trees import (
    SourceError,
    checkout_tree,
    memory_tree,
    nearest_release,
    release_tree,
    source_root,
)

FILES = {
    "sglang/srt/speculative/eagle_info.py": "class SpecInput: ...\n",
    "sglang/srt/layers/attention/triton_backend.py": "class B: ...\n",
    "sglang/version.py": '__version__ = "0.5.14"\n',
}


def test_version_checks_name_the_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert check_version("0.5.13.post1", KNOWN) == "0.5.13.post1"
    with pytest.raises(ReleaseError, match=r"'banana'.*not a version string.*0\.5\.12"):
        check_version("banana", KNOWN)
    with pytest.raises(ReleaseError, match=r"'0\.5\.99'.*no such release.*0\.5\.14"):
        check_version("0.5.99", KNOWN)
    assert sorted(["0.5.14", "0.5.9", "0.5.13.post1", "0.5.13"], key=version_key) == [
        "0.5.9",
        "0.5.13",
        "0.5.13.post1",
        "0.5.14",
    ]
    cache = write_fake_cache(tmp_path, {"0.5.13": FILES})
    with pytest.raises(ReleaseError, match="0.5.99"):
        check_versions(UpstreamContext(cache_dir=cache, log=quiet), ["0.5.13", "0.5.99"])
    assert workbench_main(["upstream", "--cache-dir", str(cache), "replay", "--sglang", "0.5.99"]) == 2
    err = capsys.readouterr().err
    assert "0.5.99" in err and "known releases" in err and "0.5.13.post1" in err


def test_release_tree_unpacks_once_and_overlays_changes(tmp_path: Path) -> None:
    ctx = UpstreamContext(cache_dir=write_fake_cache(tmp_path, {"0.5.14": FILES}), log=quiet)
    tree = release_tree(ctx, "0.5.14")
    assert (tree.label, tree.release) == ("sglang 0.5.14", "0.5.14")
    assert sorted(tree.files) == sorted(p for p in FILES if p.startswith("sglang/srt/"))
    assert release_tree(ctx, "0.5.14").root == tree.root  # unpacked once, reused
    spec = "sglang/srt/speculative/eagle_info.py"
    changed = tree.with_changes({spec: "class SpecInput:\n    x = 1\n", "sglang/srt/new.py": "y = 2\n"})
    assert changed.files[spec].endswith("x = 1\n") and tree.files[spec] == FILES[spec]
    assert "sglang/srt/new.py" in changed.files and "sglang/srt/new.py" not in tree.files
    assert spec not in tree.with_changes({spec: None}).files
    out = changed.write(tmp_path / "checkout")
    back = checkout_tree(out)
    assert back.files[spec] == changed.files[spec] and back.release == "0.5.14"
    assert (out / "python" / "sglang" / "version.py").exists()  # the whole package, so that it imports
    assert (tree.root / spec).read_text() == FILES[spec]  # the cache is never edited


def test_memory_trees_and_source_roots(tmp_path: Path) -> None:
    tree = memory_tree(FILES, "toy")
    assert tree.under("sglang/srt/layers/") == {k: v for k, v in FILES.items() if "layers" in k}
    assert tree.get("sglang/srt/missing.py") is None
    memory_tree(FILES).write(tmp_path / "co")
    assert source_root(tmp_path / "co") == (tmp_path / "co" / "python").resolve()
    with pytest.raises(SourceError, match="no sglang/srt package"):
        source_root(tmp_path)
    assert nearest_release("0.5.14.dev3", KNOWN) == "0.5.13.post1"
    assert nearest_release("0.5.13", KNOWN) == "0.5.13.post1"
    assert nearest_release(None, KNOWN) == "0.5.14"


def test_context_is_explicit_and_locks_cache_entries(tmp_path: Path) -> None:
    ctx = UpstreamContext(cache_dir=tmp_path, log=quiet, timeout_s=5)
    assert ctx.replace(timeout_s=9).timeout_s == 9 and ctx.timeout_s == 5
    with ctx.lock("wheel-0.5.14"):
        assert (tmp_path / ".wheel-0.5.14.lock").exists()


def test_dependency_pins_come_from_the_wheel(tmp_path: Path) -> None:
    wheel = write_fake_cache(tmp_path, {"0.5.13": FILES}) / "wheels" / "sglang-0.5.13-py3-none-any.whl"
    specs = dependency_specs("0.5.13", wheel)
    assert "transformers==5.8.1" in specs and "openai==2.6.1" in specs
    assert not any(s.startswith(("torchvision", "torch==", "av")) for s in specs)
    assert "apache-tvm-ffi" not in specs and "apache-tvm-ffi" in dependency_specs("0.5.23", wheel)


def test_torchvision_standin_imports_and_refuses_use(tmp_path: Path) -> None:
    write_standin(tmp_path)
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import torchvision, importlib.metadata as md
        from torchvision.io import decode_jpeg
        from torchvision.transforms import InterpolationMode, functional as F
        import torchvision.transforms.v2.functional as tvF
        import torchvision.transforms as T
        assert torchvision.WORKBENCH_STANDIN and InterpolationMode.BICUBIC.value == "bicubic"
        class Mine(T.Compose): pass
        try:
            decode_jpeg(b"")
        except RuntimeError as exc:
            print("refused:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "refused: torchvision.io.decode_jpeg is an eagle-workbench import stand-in" in out.stdout
