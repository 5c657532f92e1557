"""The nightly matrix: grids and single cells, each a notebook + parameters + expected outcome.

An expectation is ``"ok"``, a named expectation from ``expectations:``, or a dict of record fields
(``status``, ``exception_type``, ``rank``, ``phase``, ``forward_mode``, ``batch_size``,
``message_contains``, ``raised_at``: the ``file:line`` the crash's innermost sglang frame ends with);
a dict of those keyed by run role (``"*"``: every run) checks several runs.
An unkeyed expectation applies to the notebook record's primary run.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.run.record import STATUSES

EXPECT_FIELDS = (
    "status",
    "exception_type",
    "rank",
    "phase",
    "forward_mode",
    "batch_size",
    "message_contains",
    "raised_at",  # "file:line" the crash's innermost sglang frame ends with (a line of one release)
)
PRIMARY = "primary"


class MatrixError(ValueError):
    """The matrix file is malformed; the message names the entry."""


@dataclass
class Cell:
    name: str
    notebook: str  # path relative to the repository root (or absolute)
    parameters: dict[str, Any]  # the cell's own: a notebook must declare every one
    expect: dict[str, dict[str, Any]]  # role ("primary", "*", or a role name) -> expected record fields
    defaults: dict[str, Any] = field(default_factory=dict)  # matrix-wide: given where the notebook declares them
    weight: float = 1.0  # relative run time: heavier cells start first so the pool ends together
    # a release's kernel to run on ({sglang: X, sglang_src: DIR}; `workbench upstream kernel`), else the workbench's
    kernel: dict[str, Any] | None = None

    @property
    def slug(self) -> str:
        """The name as a file name."""
        return re.sub(r"[^A-Za-z0-9_.=-]+", "__", self.name)

    def to_dict(self) -> dict:
        """JSON-serialisable form, for results files."""
        return {
            "name": self.name,
            "notebook": self.notebook,
            "parameters": self.parameters,
            "expect": self.expect,
            "defaults": self.defaults,
        }


@dataclass
class Matrix:
    path: str
    cells: list[Cell]
    cell_timeout_s: float = 300.0
    notebook_timeout_s: float = 900.0
    start_timeout_s: float = 120.0
    accept_length_drop: float = 0.1
    checks: dict[str, bool] = field(default_factory=lambda: {"output_parity": True, "lossless": True})

    def shard(self, index: int, count: int) -> list[Cell]:
        """Cells of shard ``index`` (1-based) of ``count``: every count-th cell, so each shard gets a mix."""
        if not 1 <= index <= count:
            raise MatrixError(f"shard {index}/{count}: the index must be in 1..{count}")
        return self.cells[index - 1 :: count]


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` -> (i, N)."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not m or int(m.group(2)) < 1:
        raise MatrixError(f"--shard {text!r}: expected i/N with 1 <= i <= N, e.g. 1/3")
    return int(m.group(1)), int(m.group(2))


def _read(path: Path) -> dict:
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        doc = yaml.safe_load(text)
    else:
        doc = json.loads(text)
    if not isinstance(doc, dict):
        raise MatrixError(f"{path}: the top level must be a mapping")
    return doc


def _one(value: Any, named: dict[str, dict], where: str) -> dict[str, Any]:
    if isinstance(value, str):
        if value in STATUSES:
            return {"status": value}
        if value not in named:
            raise MatrixError(f"{where}: unknown expectation {value!r}; named ones: {sorted(named)}")
        return dict(named[value])
    if isinstance(value, dict) and "status" in value:
        unknown = sorted(set(value) - set(EXPECT_FIELDS))
        if unknown:
            raise MatrixError(f"{where}: unknown expectation field(s) {unknown}; valid: {list(EXPECT_FIELDS)}")
        return dict(value)
    raise MatrixError(f"{where}: an expectation is 'ok', a name, or a mapping with 'status'; got {value!r}")


def normalize_expect(value: Any, named: dict[str, dict], where: str) -> dict[str, dict[str, Any]]:
    """Role -> expected fields. A bare expectation is for the primary run."""
    if isinstance(value, dict) and "status" not in value:
        return {role: _one(v, named, f"{where} role {role!r}") for role, v in value.items()}
    return {PRIMARY: _one(value, named, where)}


def _matches(rule: dict, params: dict) -> bool:
    return all(params.get(k) in (v if isinstance(v, list) else [v]) for k, v in rule.items())


def _grid_cells(grid: dict, defaults: dict, named: dict, where: str) -> list[Cell]:
    if "notebook" not in grid or not isinstance(grid.get("axes"), dict):
        raise MatrixError(f"{where}: a grid needs 'notebook' and 'axes'")
    stem = Path(grid["notebook"]).stem
    keys = list(grid["axes"])
    cells = []
    for values in itertools.product(*(grid["axes"][k] for k in keys)):
        point = dict(zip(keys, values, strict=False))
        expect = grid.get("expect", "ok")
        for rule in grid.get("rules", []):
            if _matches(rule.get("when", {}), point):
                expect = rule["expect"]
                break
        label = "/".join(f"{k}{v}" if isinstance(v, int) else str(v) for k, v in point.items())
        name = f"{stem}/{label}"
        params = {**grid.get("parameters", {}), **point}
        cells.append(
            Cell(
                name,
                grid["notebook"],
                params,
                normalize_expect(expect, named, name),
                dict(defaults),
                float(grid.get("weight", 1.0)),
            )
        )
    return cells


def _kernel(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("sglang"), str) or set(value) - {"sglang", "sglang_src"}:
        raise MatrixError(f"{where}: kernel {value!r}; valid: {{sglang: X}} or {{sglang: X, sglang_src: DIR}}")
    return dict(value)


def load_matrix(path: str) -> Matrix:
    """Read and expand a matrix file (YAML or JSON)."""
    p = Path(path)
    doc = _read(p)
    defaults, named = doc.get("defaults", {}), doc.get("expectations", {})
    cells: list[Cell] = []
    for i, grid in enumerate(doc.get("grids", [])):
        cells += _grid_cells(grid, defaults, named, f"{p}: grids[{i}]")
    for i, c in enumerate(doc.get("cells", [])):
        where = f"{p}: cells[{i}]"
        if "name" not in c or "notebook" not in c:
            raise MatrixError(f"{where}: a cell needs 'name' and 'notebook'")
        cells.append(
            Cell(
                c["name"],
                c["notebook"],
                dict(c.get("parameters", {})),
                normalize_expect(c.get("expect", "ok"), named, where),
                dict(defaults),
                float(c.get("weight", 1.0)),
                _kernel(c.get("kernel"), where),
            )
        )
    names = [c.name for c in cells]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise MatrixError(f"{p}: duplicate cell names {dupes}")
    if not cells:
        raise MatrixError(f"{p}: no cells")
    t, tol = doc.get("timeouts", {}), doc.get("tolerances", {})
    return Matrix(
        str(p),
        cells,
        cell_timeout_s=float(t.get("cell_s", 300)),
        notebook_timeout_s=float(t.get("notebook_s", 900)),
        start_timeout_s=float(t.get("start_s", 120)),
        accept_length_drop=float(tol.get("accept_length_drop", 0.1)),
        checks={"output_parity": True, "lossless": True, **doc.get("checks", {})},
    )


def notebook_expect(cell: Cell) -> str:
    """The ``expect`` parameter a cell's notebook gets unless the cell sets one: from the primary expectation."""
    status = cell.expect.get(PRIMARY, {}).get("status")
    return status if status in ("ok", "crashed") else "any"
