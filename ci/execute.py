"""One notebook through papermill, in its own process: ``python -m workbench_ci.execute JOB.json``.

The job names the input and output notebooks, the parameters, the working directory, the kernel
(``kernel_name``; ``eagle-workbench`` from the runner) and the timeouts; the outcome goes to the
job's ``result`` path as JSON: ``completed``, ``failed`` (a cell raised), ``timeout`` (a cell ran
past ``cell_timeout_s``), ``killed`` (the kernel died) or ``error`` (papermill itself failed, e.g.
the kernel never started).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

OUTCOMES = ("completed", "failed", "timeout", "killed", "error")  # an execution's ``outcome``
EXECUTION_ERROR_FIELDS = ("cell", "ename", "evalue", "traceback")


def execution_result(
    outcome: str,
    *,
    cell: int | None = None,
    ename: str | None = None,
    evalue: str | None = None,
    traceback: str | None = None,
    wall_s: float = 0.0,
) -> dict:
    """The one constructor of an execution outcome: {"outcome", "error", "wall_s"}; ``error`` is None
    when completed, else {cell, ename, evalue, traceback} (cell: index of the failing cell, if known)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"invalid outcome {outcome!r}; valid: {', '.join(OUTCOMES)}")
    error = None if outcome == "completed" else {"cell": cell, "ename": ename, "evalue": evalue, "traceback": traceback}
    return {"outcome": outcome, "error": error, "wall_s": wall_s}


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


def execute(job: dict) -> dict:
    """Run the job's notebook; never raises."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    t0 = time.perf_counter()
    out = Path(job["output"])
    out.parent.mkdir(parents=True, exist_ok=True)
    result = execution_result("completed")
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
        result = execution_result("failed", cell=e.cell_index, ename=e.ename, evalue=e.evalue)
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
    result["wall_s"] = time.perf_counter() - t0
    return result


def main(argv: list[str] | None = None) -> int:
    """Execute the job file named by the first argument; exit 0 when the notebook completed."""
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text())
    result = execute(job)
    Path(job["result"]).write_text(json.dumps(result, indent=1))
    return 0 if result["outcome"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
