"""Lower layers never import upper ones (imports read with ast; ``if TYPE_CHECKING:`` blocks are
annotations only and do not count)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENTRY = (
    "workbench.api",
    "workbench.cli",
    "workbench.notebook",
    "workbench.runner",
    "workbench.bench",
    "workbench.dp.launch",
    "workbench.dp.torchrun",
    "ci",
)


def _runtime_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import executed at run time, relative imports resolved."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
        for n in ast.walk(node)
    }
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            yield from (
                (node.lineno, f"{base}.{a.name}" if node.level and not node.module else base) for a in node.names
            )


def _violations(layer: str, forbidden: tuple[str, ...]) -> list:
    found = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for line, module in _runtime_imports(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return found


@pytest.mark.parametrize(
    "layer,forbidden",
    [
        ("kernels", ("workbench", "ci")),
        ("workbench", ("ci",)),
        (
            "workbench/models",
            (
                "workbench.engine",
                "workbench.speculative",
                "workbench.backends",
                "workbench.dp",
                "workbench.upstream",
                *ENTRY,
            ),
        ),
        ("workbench/mem", ("workbench.engine", "workbench.speculative", "workbench.backends", "workbench.dp", *ENTRY)),
        ("workbench/engine", ("workbench.dp", "workbench.upstream", *ENTRY)),
        ("workbench/speculative", ("workbench.dp", "workbench.upstream", *ENTRY)),
        ("workbench/backends", ("workbench.speculative", "workbench.dp", "workbench.upstream", *ENTRY)),
        ("workbench/dp", ("workbench.cli", "workbench.notebook", "workbench.bench", "ci")),
    ],
)
def test_lower_layers_do_not_import_upper_ones(layer, forbidden):
    assert _violations(layer, forbidden) == []


def test_the_check_sees_a_violation(tmp_path, monkeypatch):
    """The scanner itself: a runtime import counts, a TYPE_CHECKING one does not."""
    pkg = tmp_path / "workbench" / "models"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import workbench.dp\n"
        "from workbench.engine import worker\nfrom ..api import reproduce\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _violations("workbench/models", ("workbench.engine", "workbench.dp", "workbench.api")) == [
        "workbench/models/bad.py:4 imports workbench.engine",
        "workbench/models/bad.py:5 imports workbench.api",
    ]
