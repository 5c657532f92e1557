"""The network nightly's real-runtime cells against the shipped measurement: every role a cell expects
is shipped for its release and backend, and the shipped run meets the expectation, including the line
of that release the crash is raised at (expectations keyed by release as well as by backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench_ci.expect import check_run
from workbench_ci.matrix import load_matrix

ROOT = Path(__file__).resolve().parents[2]
ALL = [c for c in load_matrix(str(ROOT / "ci" / "matrix-network.yaml")).cells if c.name.startswith("06_real")]
SHIPPED = json.loads((ROOT / "workbench" / "assets" / "runtime_runs.json").read_text())["runs"]
# measured only live by the nightly (their two upstream limits, docs/real-runtime.md): not in the shipped file
NOT_SHIPPED = {"06_real_runtime/0.5.14/torch_native"}
CELLS = [c for c in ALL if c.name not in NOT_SHIPPED]


def test_only_the_named_cells_are_not_shipped() -> None:
    """A cell is shipped when every role it runs is in the shipped file for its release and backend."""

    def shipped(c) -> bool:
        p = c.parameters
        return all(f"{p['release']}/{p['backend']}/{r}" in SHIPPED for r in p["roles"])

    assert {c.name for c in ALL if not shipped(c)} == NOT_SHIPPED


def test_every_release_has_its_cell() -> None:
    releases = {k.split("/")[0] for k in SHIPPED}
    assert releases <= {c.parameters["release"] for c in CELLS}


@pytest.mark.parametrize("cell", CELLS, ids=[c.name for c in CELLS])
def test_the_cells_expectations_hold_on_the_shipped_runs(cell) -> None:
    release, backend = cell.parameters["release"], cell.parameters["backend"]
    assert sorted(f"runtime/{r}" for r in cell.parameters["roles"]) == sorted(k for k in cell.expect if k != "checks")
    for role in cell.parameters["roles"]:
        want = cell.expect[f"runtime/{role}"]
        key = f"{release}/{backend}/{role}"
        assert key in SHIPPED, f"{key} is not in the shipped measurement"
        assert check_run(want, SHIPPED[key]) == [], key
        if want["status"] == "crashed" and backend == "triton":
            assert "raised_at" in want, f"{cell.name} {role}: a triton crash names its release's line"
