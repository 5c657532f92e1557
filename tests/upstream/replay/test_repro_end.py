"""How a reproducer's run ended (``repro_end``): the script's ``status`` / ``stopped_at``, the reader of
results written before them (``outcome``), bad words refused by name, and the readers that show them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from workbench.run.record import STATUSES
from workbench.upstream.replay.repro_end import (
    NO_SPEC_CLASS,
    REPRO_STATUSES,
    ReproResultError,
    describe,
    repro_ended,
)
from workbench.views.guard_tables import reproducer_table

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "workbench/upstream/replay/repro_script.py"
SHIPPED = ROOT / "workbench/assets/upstream_repro"


def test_a_result_written_now_reads_its_status_and_stop() -> None:
    assert repro_ended({"status": "crashed", "at": "sglang/x.py:1"}) == ("crashed", None)
    assert repro_ended({"status": "ok", "kv_indptr": [0, 0, 0]}) == ("ok", None)
    assert repro_ended({"status": "ok", "stopped_at": NO_SPEC_CLASS}) == ("ok", NO_SPEC_CLASS)
    assert describe({"status": "ok", "stopped_at": NO_SPEC_CLASS}) == "ok, stopped at no spec class"
    assert describe({"status": "timeout", "error": "ran past 60 s"}) == "timeout"
    assert set(REPRO_STATUSES) == set(STATUSES) - {"killed"}


def test_a_result_written_before_reads_in_todays_words() -> None:
    assert repro_ended({"outcome": "raised", "at": "sglang/x.py:1"}) == ("crashed", None)
    assert repro_ended({"outcome": "completed"}) == ("ok", None)
    assert repro_ended({"outcome": "absent", "error": "AttributeError: no X"}) == ("ok", NO_SPEC_CLASS)
    assert repro_ended({"outcome": "error", "error": "needs sgl_kernel: ..."}) == ("error", None)
    assert repro_ended({"outcome": "error", "error": "ran past 600 s"}) == ("timeout", None)


def test_bad_words_are_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ReproResultError, match=r"status 'raised'; valid: ok, crashed, timeout, error"):
        repro_ended({"status": "raised"})
    with pytest.raises(
        ReproResultError, match=r"stopped_at 'absent' with status 'ok'; valid: no spec class, with status ok"
    ):
        repro_ended({"status": "ok", "stopped_at": "absent"})
    with pytest.raises(ReproResultError, match=r"stopped_at 'no spec class' with status 'error'"):
        repro_ended({"status": "error", "stopped_at": NO_SPEC_CLASS})
    with pytest.raises(
        ReproResultError, match=r"\('finished', written before `status`\); valid: completed, raised, absent, error"
    ):
        repro_ended({"outcome": "finished"})
    with pytest.raises(ReproResultError, match=r"neither status nor a known outcome \(None, written"):
        repro_ended({})


def test_the_script_writes_only_todays_words() -> None:
    """Every dict the reproducer script reports holds ``status`` (and ``stopped_at``) values `repro_ended`
    reads, and no ``outcome``."""
    written: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(SCRIPT.read_text())):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value in ("status", "stopped_at", "outcome"):
                    written.add((k.value, ast.literal_eval(v)))
    assert written == {("status", "ok"), ("status", "crashed"), ("status", "error"), ("stopped_at", NO_SPEC_CLASS)}


def test_the_reproducer_table_reads_old_and_new_results() -> None:
    finding = {"read_file": "python/sglang/srt/layers/attention/triton_backend.py", "read_line": 593}
    base = {"finding": finding, "releases": {"0.5.14": {}, "0.5.13": {}}, "raises": ["0.5.14"]}
    old = {**base, "on_release": {"outcome": "raised", "at": "sglang/a.py:1"}, "with_fix": {"outcome": "completed"}}
    new = {**base, "on_release": {"status": "crashed", "at": "sglang/a.py:1"}, "with_fix": {"status": "ok"}}
    rows = reproducer_table({"results": {"old": old, "new": new}}).rows
    assert [(r["on the release"], r["with the fix"]) for r in rows] == [("crashed at sglang/a.py:1", "ok")] * 2


def test_the_shipped_results_read() -> None:
    """Every shipped reproducer result (on the release, with the fix, per release) reads; each raised on
    its release and returned with the fix."""
    results = [json.loads(p.read_text()) for p in sorted(SHIPPED.glob("*/result.json"))]
    assert results
    for r in results:
        assert repro_ended(r["on_release"]) == ("crashed", None) and repro_ended(r["with_fix"]) == ("ok", None)
        assert all(repro_ended(x)[0] in REPRO_STATUSES for x in r["releases"].values())
    runs = [x for r in results for x in (r["on_release"], r["with_fix"], *r["releases"].values())]
    assert all("status" in x and "outcome" not in x for x in runs)  # regenerated since the rename
    assert ("ok", NO_SPEC_CLASS) in {repro_ended(x) for x in runs}  # 0.5.20 has no PPSpecRelayInput
    assert all('"outcome"' not in p.read_text() for p in SHIPPED.glob("*/repro.py"))
