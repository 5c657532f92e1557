"""`make test`'s units of work under pytest-xdist (tests/conftest.py) name tests that exist: a renamed
test would otherwise fall back into its file's unit without a word, and `make test` would slow down."""

from __future__ import annotations

from conftest import LONG_FIRST, OWN_UNITS, work_unit


def test_every_unit_names_collected_tests_and_other_tests_go_with_their_file(collected_marks):
    named = OWN_UNITS | set(LONG_FIRST)
    files = sorted({n.split("::", 1)[0] for n in named})
    ids = set(collected_marks)  # every collected test's node id (conftest: one collection of tests/ per run)
    assert all(any(i.startswith(f + "::") for i in ids) for f in files), "a unit names a file with no test"
    assert sorted(n for n in OWN_UNITS if n not in ids) == []
    assert sorted(n for n in LONG_FIRST if n not in ids and n not in files) == []
    assert set(LONG_FIRST) - OWN_UNITS <= set(files)  # the others are whole files
    one = "tests/engine/test_engine.py::test_every_backend_gives_the_greedy_output_on_the_shipped_prompts[fa3]"
    assert one in ids and work_unit(one) == "tests/engine/test_engine.py"
    assert {work_unit(n) for n in OWN_UNITS} == OWN_UNITS
