"""One notebook through papermill, in its own process: ``python -m workbench_ci.execute JOB.json``.

The job names the input and output notebooks, the parameters, the working directory, the kernel
(``kernel_name``; ``eagle-workbench`` from the runner) and the timeouts; how it ended goes to the
job's ``result`` path as an ``Execution`` in JSON (``workbench.run.serialise``), its ``status`` in the
workbench's one vocabulary (``workbench.run.record.STATUSES``): ``ok``, ``crashed`` (a cell raised),
``timeout`` (a cell ran past ``cell_timeout_s``), ``killed`` (the kernel died) or ``error``
(papermill itself failed, e.g. the kernel never started).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from workbench.run.record import STATUSES
from workbench.run.serialise import to_dict


@dataclass
class ExecutionError:
    """What stopped the notebook: the failing cell's index (if known) and the exception."""

    cell: int | None
    ename: str | None
    evalue: str | None
    traceback: str | None = None


@dataclass
class Execution:
    """How one notebook's execution ended; ``error`` is None when ``status`` is ok."""

    status: str
    error: ExecutionError | None = None
    wall_s: float = 0.0
    record_error: str | None = None  # why the notebook's record could not be read (the runner sets it)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"invalid status {self.status!r}; valid: {', '.join(STATUSES)}")


def execution_result(
    status: str,
    *,
    cell: int | None = None,
    ename: str | None = None,
    evalue: str | None = None,
    traceback: str | None = None,
    wall_s: float = 0.0,
) -> Execution:
    """The one constructor of an execution's ending: ``error`` is None when ok, else the failing cell
    (its index, if known) and the exception."""
    error = None if status == "ok" else ExecutionError(cell, ename, evalue, traceback)
    return Execution(status, error, wall_s)


def _failed_cell(output: Path) -> int | None:
    """Index of the cell papermill marked as raising / running when it stopped, if any."""
    try:
        cells = json.loads(output.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return None
    for i, c in enumerate(cells):
        pm = c.get("metadata", {}).get("papermill", {})
        if pm.get("exception") or pm.get("status") == "running":
            return i
    return None


def execute(job: dict) -> Execution:
    """Run the job's notebook; never raises."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    t0 = time.perf_counter()
    out = Path(job["output"])
    out.parent.mkdir(parents=True, exist_ok=True)
    result = execution_result("ok")
    try:
        papermill.execute_notebook(
            job["input"],
            str(out),
            parameters=job["parameters"],
            cwd=job.get("cwd"),
            kernel_name=job.get("kernel_name"),
            execution_timeout=job["cell_timeout_s"],
            start_timeout=job.get("start_timeout_s", 120),
            progress_bar=False,
            log_output=False,
            report_mode=False,
        )
    except PapermillExecutionError as e:
        result = execution_result("crashed", cell=e.cell_index, ename=e.ename, evalue=e.evalue)
    except CellTimeoutError as e:
        result = execution_result(
            "timeout",
            cell=_failed_cell(out),
            ename="CellTimeoutError",
            evalue=f"a cell ran past {job['cell_timeout_s']} s: {str(e)[:300]}",
        )
    except DeadKernelError as e:
        result = execution_result(
            "killed", cell=_failed_cell(out), ename="DeadKernelError", evalue=f"the kernel died: {e}"
        )
    except Exception as e:  # papermill / kernel start-up trouble: reported, not raised
        result = execution_result(
            "error",
            cell=_failed_cell(out),
            ename=type(e).__name__,
            evalue=str(e)[:2000],
            traceback=traceback.format_exc(),
        )
    result.wall_s = time.perf_counter() - t0
    return result


def main(argv: list[str] | None = None) -> int:
    """Execute the job file named by the first argument; exit 0 when the notebook ran to its end (ok)."""
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text())
    result = execute(job)
    Path(job["result"]).write_text(json.dumps(to_dict(result), indent=1))
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
