"""Count string-key look-ups (``x["key"]``, ``.get("key")``) per 1,000 lines.

Usage: ``python scripts/count_key_lookups.py [DIR ...]`` (default: workbench ci).
Lines are all lines of the ``.py`` files under each directory.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# ``x["key"]`` or ``x['key']`` (a subscript by a string literal), and ``.get("key"``.
SUBSCRIPT = re.compile(r"""[\w\)\]]\[\s*(["'])[^"'\n]*\1\s*\]""")
GET = re.compile(r"""\.get\(\s*(["'])[^"'\n]*\1""")


def count(paths: list[Path]) -> tuple[int, int]:
    """Return (look-ups, lines) over every ``.py`` file under ``paths``."""
    hits = lines = 0
    for root in paths:
        if not root.exists():
            raise SystemExit(f"count_key_lookups: no such directory {str(root)!r}")
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines += text.count("\n")
            hits += len(SUBSCRIPT.findall(text)) + len(GET.findall(text))
    return hits, lines


def main(argv: list[str]) -> int:
    """Print look-ups, lines and look-ups per 1,000 lines."""
    roots = [Path(a) for a in (argv or ["workbench", "ci"])]
    hits, lines = count(roots)
    per_k = 1000 * hits / lines if lines else 0.0
    print(f"{hits} look-ups / {lines} lines = {per_k:.1f} per 1,000 lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
