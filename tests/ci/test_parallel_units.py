"""`make test`'s units of work under pytest-xdist (tests/conftest.py) name tests that exist: a renamed
test would otherwise fall back into its file's unit without a word, and `make test` would slow down."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import LONG_FIRST, OWN_UNITS, work_unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_unit_names_collected_tests_and_other_tests_go_with_their_file():
    named = OWN_UNITS | set(LONG_FIRST)
    files = sorted({n.split("::", 1)[0] for n in named})
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = {line.strip() for line in out.stdout.splitlines() if "::" in line}
    assert sorted(n for n in OWN_UNITS if n not in ids) == []
    assert sorted(n for n in LONG_FIRST if n not in ids and n not in files) == []
    assert set(LONG_FIRST) - OWN_UNITS <= set(files)  # the others are whole files
    one = "tests/engine/test_engine.py::test_every_backend_gives_the_greedy_output_on_the_shipped_prompts[fa3]"
    assert one in ids and work_unit(one) == "tests/engine/test_engine.py"
    assert {work_unit(n) for n in OWN_UNITS} == OWN_UNITS
