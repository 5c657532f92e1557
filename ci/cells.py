"""Run matrix cells as papermill child processes, at most ``jobs`` at once, with a progress line per
cell; collect how each cell's execution ended and its notebook record, and judge it (``workbench_ci.expect``)
into a ``workbench_ci.results.CellResult``.

Each job runs under its own ``workbench.run.supervisor.Supervisor`` (its own process group, the
per-notebook limit, SIGTERM then SIGKILL), with ``tree=True``: the notebook's kernel may start
processes in sessions of their own (the real runtime's ranks), which the end reaches too. The
runner keeps its own scheduling loop (a queue of jobs, several at once), so it uses the
supervisor's start, deadline and end, not its polling wait."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from workbench.notebook import load_record  # the notebook face loads the engine; a shard merge has no torch
from workbench.run.dp import LOG_DIR_ENV
from workbench.run.serialise import RecordError, from_dict
from workbench.run.supervisor import Supervisor
from workbench_ci.execute import Execution, execution_result
from workbench_ci.expect import check_cell, describe
from workbench_ci.kernelspec import kernel_name
from workbench_ci.matrix import Cell, Matrix, MatrixError, notebook_expect
from workbench_ci.results import CellResult

POLL_S = 0.2
HEARTBEAT_S = 60.0


@dataclass
class Job:
    cell: Cell
    parameters: dict
    paths: dict[str, str]  # relative to the output folder: notebook, record, log, job, result
    proc: subprocess.Popen | None = None
    sup: Supervisor | None = None
    started: float = 0.0
    log: TextIO | None = None


def usable_cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs(n_cells: int) -> int:
    """min(usable cores, cells)."""
    return max(1, min(usable_cores(), n_cells))


def _declared(notebook: Path) -> dict[str, dict]:
    import papermill

    return papermill.inspect_notebook(str(notebook))


def prepare(cell: Cell, root: Path, out: Path, extra: dict) -> Job:
    """Resolve the notebook, check the cell's parameters against its ``parameters`` cell, add record_path/expect."""
    nb = Path(cell.notebook) if Path(cell.notebook).is_absolute() else root / cell.notebook
    if not nb.is_file():
        raise ValueError(f"notebook {cell.notebook} not found (looked at {nb})")
    declared = _declared(nb)
    unknown = sorted(set(cell.parameters) - set(declared))
    if unknown:
        raise ValueError(
            f"parameter(s) {unknown} are not in {nb.name}'s parameters cell; it declares {sorted(declared)}"
        )
    params = {k: v for k, v in {**cell.defaults, **extra}.items() if k in declared}
    params.update(cell.parameters)
    slug = cell.slug
    paths = {
        "notebook": f"notebooks/{slug}.ipynb",
        "record": f"records/{slug}.json",
        "log": f"logs/{slug}.log",
        "rank_logs": f"logs/{slug}",
        "job": f"jobs/{slug}.json",
        "result": f"jobs/{slug}.result.json",
        "tmp": f"jobs/{slug}.tmp",
    }
    params["record_path"] = str((out / paths["record"]).resolve())
    params.setdefault("expect", notebook_expect(cell))
    return Job(cell, params, paths)


def thread_env(jobs: int) -> dict[str, str]:
    """Math-library threads per notebook so ``jobs`` notebooks share the cores instead of spinning
    against each other (torch's OpenMP threads busy-wait); variables already set are kept."""
    n = str(max(1, usable_cores() // jobs))
    return {k: os.environ.get(k, n) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def _start(job: Job, matrix: Matrix, root: Path, out: Path, threads: dict[str, str], kernel: str) -> None:
    job.sup = Supervisor(matrix.notebook_timeout_s, tree=True)
    for key in ("notebook", "record", "log", "job"):
        (out / job.paths[key]).parent.mkdir(parents=True, exist_ok=True)
    (out / job.paths["tmp"]).mkdir(exist_ok=True)
    for key in ("record", "result"):
        (out / job.paths[key]).unlink(missing_ok=True)
    nb = Path(job.cell.notebook)
    spec = {
        "input": str(nb if nb.is_absolute() else root / nb),
        "output": str(out / job.paths["notebook"]),
        "parameters": job.parameters,
        "cwd": str(root),
        "cell_timeout_s": matrix.cell_timeout_s,
        "start_timeout_s": matrix.start_timeout_s,
        "result": str(out / job.paths["result"]),
        "kernel_name": kernel,
    }
    jupyter: dict[str, str] = {}
    if job.cell.kernel:  # a release's kernel, registered in this run's own Jupyter data folder
        # only a cell on a release's kernel needs the upstream code (and its cache)
        from workbench.upstream.context import UpstreamContext
        from workbench.upstream.runtime.kernel import register

        jupyter = {"JUPYTER_DATA_DIR": str(out / "jupyter")}
        before = os.environ.get("JUPYTER_DATA_DIR")
        os.environ.update(jupyter)
        try:
            cell = job.cell.kernel
            spec["kernel_name"] = register(UpstreamContext(), cell["sglang"], cell.get("sglang_src"))["name"]
        finally:
            if before is None:
                del os.environ["JUPYTER_DATA_DIR"]
            else:
                os.environ["JUPYTER_DATA_DIR"] = before
    (out / job.paths["job"]).write_text(json.dumps(spec, indent=1))
    # The cell's temp files (DP ranks' wb-dp-* folders) go to its own TMPDIR, removed when it ends even
    # if the kernel was killed; rank logs a record points to are kept under logs/.
    env = {
        **os.environ,
        **threads,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        "TMPDIR": str(out / job.paths["tmp"]),
        LOG_DIR_ENV: str(out / job.paths["rank_logs"]),
        **jupyter,
    }
    job.log = open(out / job.paths["log"], "w")
    job.proc = job.sup.start(
        [sys.executable, "-m", "workbench_ci.execute", str(out / job.paths["job"])], cwd=root, env=env, stdout=job.log
    )
    job.started = time.perf_counter()


def _finish(job: Job, out: Path, wall_limit_hit: bool) -> CellResult:
    job.log.close()
    shutil.rmtree(out / job.paths["tmp"], ignore_errors=True)
    wall = time.perf_counter() - job.started
    result_file = out / job.paths["result"]
    if wall_limit_hit:
        execution = execution_result(
            "timeout", ename="NotebookTimeout", evalue=f"notebook ran past the hard limit; killed after {wall:.0f} s"
        )
    elif result_file.is_file():
        try:
            execution = from_dict(Execution, json.loads(result_file.read_text()))
        except (ValueError, RecordError) as e:  # the child's channel: a result it did not write whole
            execution = execution_result("error", ename=type(e).__name__, evalue=f"{job.paths['result']}: {e}")
    else:
        execution = execution_result(
            "error",
            ename="RunnerChildDied",
            evalue=f"papermill process exited with code {job.proc.returncode} without a result; see {job.paths['log']}",
        )
    execution.wall_s = wall
    record_file = out / job.paths["record"]
    nb_record = None
    if record_file.is_file():
        try:
            nb_record = load_record(record_file)
        except ValueError as e:
            execution.record_error = execution.record_error or str(e)
    res = CellResult(
        name=job.cell.name,
        notebook=job.cell.notebook,
        parameters=job.parameters,
        expect=job.cell.expect,
        defaults=job.cell.defaults,
        execution=execution,
        notebook_record=nb_record,
        paths=dict(job.paths),
    )
    res.judge(check_cell(job.cell.expect, execution, nb_record))
    return res


def _progress(done: int, total: int, res: CellResult, running: int, queued: int, stream: TextIO) -> None:
    got = describe(res.primary()) if res.notebook_record else res.execution.status
    mark = "ok  " if res.verdict == "expected" else "FAIL"
    print(
        f"[{done:>{len(str(total))}}/{total}] {mark} {res.execution.wall_s:6.1f}s  {res.name}  -> "
        f"{got[:90]}   (running {running}, queued {queued})",
        file=stream,
        flush=True,
    )
    for r in res.reasons:
        print(f"        why: {r}", file=stream, flush=True)


def prepare_all(cells: list[Cell], root: Path, out: Path, extra: dict | None = None) -> list[Job]:
    """Every cell's job; a cell that cannot start (a missing notebook, a parameter its notebook does not
    declare) is a ``MatrixError`` naming every such cell, raised before anything runs or is written."""
    jobs, refused = [], []
    for cell in cells:
        try:
            jobs.append(prepare(cell, root, out, extra or {}))
        except ValueError as e:
            refused.append(f"cell {cell.name!r}: {e}")
    if refused:
        raise MatrixError("; ".join(refused))
    return jobs


def run_cells(
    queue: list[Job],
    matrix: Matrix,
    root: Path,
    out: Path,
    jobs: int,
    stream: TextIO = sys.stdout,
) -> list[CellResult]:
    """Run every job (``prepare_all``), at most ``jobs`` at once; results in the jobs' order."""
    order = [j.cell.name for j in queue]
    results: dict[str, CellResult] = {}
    queue = list(queue)
    queue.sort(key=lambda j: -j.cell.weight)
    threads = thread_env(jobs)
    kernel = kernel_name()
    print(
        f"running {len(queue)} notebook(s), {jobs} at a time ({threads['OMP_NUM_THREADS']} math thread(s) each); "
        f"per-cell timeout {matrix.cell_timeout_s:.0f} s, per-notebook limit {matrix.notebook_timeout_s:.0f} s",
        file=stream,
        flush=True,
    )
    running: list[Job] = []
    done = 0
    last_news = time.perf_counter()
    try:
        while queue or running:
            while queue and len(running) < jobs:
                job = queue.pop(0)
                _start(job, matrix, root, out, threads, kernel)
                running.append(job)
            time.sleep(POLL_S)
            for job in list(running):
                over = job.sup.over()
                if job.proc.poll() is None and not over:
                    continue
                job.sup.end()  # the papermill process and what it left (a kernel, its ranks)
                running.remove(job)
                results[job.cell.name] = res = _finish(job, out, over)
                done += 1
                last_news = time.perf_counter()
                _progress(done, len(order), res, len(running), len(queue), stream)
            if time.perf_counter() - last_news > HEARTBEAT_S:
                last_news = time.perf_counter()
                print(
                    "        still running: "
                    + ", ".join(f"{j.cell.name} ({last_news - j.started:.0f} s)" for j in running),
                    file=stream,
                    flush=True,
                )
    finally:
        for job in running:  # interrupted: the children run in their own sessions and would outlive us
            job.sup.end()
            shutil.rmtree(out / job.paths["tmp"], ignore_errors=True)
    return [results[name] for name in order]
