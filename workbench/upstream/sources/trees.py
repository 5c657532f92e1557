"""Source trees the static analyser reads: a release's unpacked wheel, a checkout, or text in memory.

A tree maps paths below the folder holding `sglang/` (`sglang/srt/...py`) to their text, read
lazily and never imported. `with_changes` overlays edited files (a mutant, a proposed fix)
without touching the folder.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..context import UpstreamContext
from .envs import ensure_sources

SRT = "sglang/srt/"
_VERSION = re.compile(r"""^\s*(?:__version__|version)\b[^\n'"]*=\s*['"](\d+\.\d+[^'"]*)['"]""", re.M)


class SourceError(ValueError):
    """A source folder that holds no sglang package."""


class _LazyFiles(Mapping):
    """{relpath: text} of every `sglang/srt/**.py` under `root`, each read on first use (a file that
    cannot be read or decoded raises SourceError naming it)."""

    def __init__(self, root: Path):
        self.root = root
        self._paths = sorted(p.relative_to(root).as_posix() for p in (root / SRT).rglob("*.py"))
        self._text: dict[str, str] = {}

    def __getitem__(self, path: str) -> str:
        if path not in self._text:
            if path not in self._paths:
                raise KeyError(path)
            try:
                self._text[path] = (self.root / path).read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:  # never analysed half-read: the lint exits 2
                raise SourceError(f"{self.root / path}: cannot be read as UTF-8 Python source: {exc}") from None
        return self._text[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


class _Overlay(Mapping):
    """`base` with some files replaced (a text) or removed (None)."""

    def __init__(self, base: Mapping, changes: dict[str, str | None]):
        self.base, self.changes = base, changes
        self._paths = sorted((set(base) | set(changes)) - {p for p, t in changes.items() if t is None})

    def __getitem__(self, path: str) -> str:
        if path in self.changes:
            text = self.changes[path]
            if text is None:
                raise KeyError(path)
            return text
        return self.base[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


@dataclass
class SourceTree:
    """One sglang source tree: `files` {`sglang/srt/...py`: text}, where it came from, its version."""

    label: str
    files: Mapping[str, str]
    release: str | None = None  # the release it is (or, for a checkout, the version it declares)
    root: Path | None = None  # the folder holding `sglang/`; None for text in memory
    changes: dict[str, str | None] = field(default_factory=dict)
    base: Path | None = None  # what the user named (a checkout's root); file paths in reports are relative to it
    prefix: str = ""  # `root` relative to `base` ("python/" for a checkout root), "" otherwise

    def under(self, prefix: str) -> dict[str, str]:
        """{path: text} of the files whose path starts with `prefix`."""
        return {p: self.files[p] for p in self.files if p.startswith(prefix)}

    def get(self, path: str) -> str | None:
        """The text of `path`, or None when the tree has no such file."""
        return self.files[path] if path in self.files else None

    def with_changes(self, changes: dict[str, str | None], label: str | None = None) -> SourceTree:
        """This tree with `changes` ({path: new text, or None to remove}) overlaid."""
        merged = {**self.changes, **changes}
        files = _Overlay(self.files, changes)
        return SourceTree(label or self.label, files, self.release, self.root, merged, self.base, self.prefix)

    def write(self, dest: Path) -> Path:
        """Write the tree as a checkout (`dest/python/sglang/...`: the whole package when the tree
        has a folder, so that it imports, with the changes applied); returns `dest`."""
        base = Path(dest) / "python"
        if self.root is not None:
            shutil.copytree(self.root / "sglang", base / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
            todo = self.changes
        else:
            todo = {p: self.files[p] for p in self.files}
        for path, text in todo.items():
            out = base / path
            if text is None:
                out.unlink(missing_ok=True)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        return Path(dest)


def memory_tree(files: dict[str, str], label: str = "in memory", release: str | None = None) -> SourceTree:
    """A tree of sources given as text (tests, synthetic fixtures)."""
    return SourceTree(label, dict(files), release)


def source_root(path: Path) -> Path:
    """The folder holding `sglang/` for a checkout root, its `python/` folder or that folder."""
    path = Path(path).expanduser().resolve()
    for cand in (path, path / "python"):
        if (cand / "sglang" / "srt").is_dir():
            return cand
    raise SourceError(
        f"--sglang-src {str(path)!r}: no sglang/srt package there or in its python/ "
        "folder; give an sglang checkout root or its python/ folder"
    )


def checkout_version(path: Path) -> str | None:
    """The version a checkout declares (`sglang/_version.py`, `sglang/version.py`, pyproject)."""
    root = source_root(path)
    for rel in ("sglang/_version.py", "sglang/version.py", "pyproject.toml"):
        p = root / rel
        if p.exists() and (m := _VERSION.search(p.read_text(errors="replace"))):
            return m.group(1)
    return None


def checkout_tree(path: Path) -> SourceTree:
    """The tree of a checkout (see `source_root`); its declared version as `release`."""
    root = source_root(path)
    given = Path(path).expanduser().resolve()
    prefix = "" if root == given else root.relative_to(given).as_posix() + "/"
    return SourceTree(f"checkout {root}", _LazyFiles(root), checkout_version(root), root, base=given, prefix=prefix)


def release_tree(ctx: UpstreamContext, version: str) -> SourceTree:
    """The tree of a release: its wheel unpacked once under the cache (`src/sglang-<version>`)."""

    root = ensure_sources(ctx, version)
    return SourceTree(f"sglang {version}", _LazyFiles(root), version, root, base=root)


def nearest_release(version: str | None, known: list[str]) -> str:
    """The newest release not newer than `version` (its base version); the newest if unknown."""
    finals = [v for v in known if not Version(v).is_prerelease]
    try:
        base = Version(Version(version).base_version) if version else None
    except InvalidVersion:
        base = None
    if base is None or base < Version("0.5.10"):
        return finals[-1]
    dev = Version(version).is_devrelease or Version(version).is_prerelease
    older = [v for v in finals if (Version(v) < base if dev else Version(v) <= Version(f"{base}.post999"))]
    older = older or finals[:1]
    return older[-1]
