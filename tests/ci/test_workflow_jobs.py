"""Every job of the installed workflows, run: for each job, a venv holding exactly what the job installs
(parsed from its steps: `make venv [EXTRAS=...]` into `.venv`, `python -m pip install -c constraints.txt
...` into the runner's `python`; nothing from this interpreter's site-packages), and the job's Python
entry points run there on small inputs, most as the step's own `run:` text with small inputs in its
`env:`. A job that imports something it did not install fails here. The entry points a job has and the
ones its plan ran must be the same set, but for the few NOT_RUN names with the reason.

The venvs are kept between runs in WB_JOB_VENVS (default ~/.cache/eagle-workbench/job-venvs), one folder
per install and a hash of what decides its contents (the job's package list, Makefile, pyproject.toml,
constraints.txt, the Python), not of the checkout's path: the first run on a machine builds them (minutes,
from pip's cache); every later run, from any clone with the same contents, reuses them. A `.venv` job's
workspace holds a copy of the checkout (its editable install points into the workspace, so one venv
serves every clone), refreshed from the checkout at each run. Building one removes those of its kind unused
for PRUNE_AFTER_S.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from upstream_fixtures import toy_tree, write_fake_cache

from workbench_ci import nightly

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FIXTURES = ROOT / "tests" / "fixtures"
CACHE = Path(os.environ.get("WB_JOB_VENVS") or Path.home() / ".cache" / "eagle-workbench" / "job-venvs")
KEEP = {".venv", ".git", "artifacts", "build", "runs", ".cache", ".ruff_cache", ".pytest_cache"}
PRUNE_AFTER_S = 2 * 86400  # a venv of CACHE unused this long is removed when one of its kind is built
# entry points a job has that its plan does not run, and why
NOT_RUN = {
    ("nightly.yml", "guard", ".venv: workbench upstream nightly"): "needs PyPI's newest release and its replay venv "
    "(GBs): test_the_guard_jobs_lane_runs_in_its_venv runs it (a network test: the nightly's network shards "
    "run it), and this plan runs the same CLI's lint offline",
}


@dataclass
class Job:
    """One job: its installs and Python entry points, parsed from its run steps."""

    workflow: str
    name: str
    spec: dict
    venv_extras: str | None = None  # `make venv EXTRAS=<this>`; None: no .venv
    pip: tuple[str, ...] | None = None  # `python -m pip install -c constraints.txt <these>`; None: no pip install
    entries: set[str] = field(default_factory=set)

    def step(self, prefix: str) -> dict:
        [s] = [s for s in self.spec["steps"] if s.get("name", "").startswith(prefix)]
        return s


def _lines(script: str) -> list[str]:
    return [x.strip() for x in script.replace("\\\n", " ").splitlines() if x.strip()]


def parse_job(workflow: str, name: str, spec: dict) -> Job:
    """The job's installs and entry points; an install this does not recognise is a failure."""
    job = Job(workflow, name, spec)
    for step in spec["steps"]:
        for line in _lines(step.get("run", "")):
            if m := re.fullmatch(r"make venv(?: EXTRAS=(\S*))?", line):
                job.venv_extras = "dev" if m.group(1) is None else m.group(1)
            elif m := re.fullmatch(r"python -m pip install -c constraints\.txt ((?:[\w.-]+ ?)+)", line):
                job.pip = tuple(m.group(1).split())
            elif "pip install" in line or re.search(r"\bmake venv\b|\buv\b", line):
                pytest.fail(f"{workflow} {name}: an install this test does not parse: {line!r}")
            if line == "make test":
                job.entries.add("make test")
            for where, module in re.findall(r"(\.venv/bin/)?python -m ([\w.]+)", line):
                if module != "pip":  # the install, parsed above
                    job.entries.add(f"{'.venv' if where else 'python'}: -m {module}")
            for cmd in re.findall(r"\.venv/bin/(workbench \w+ \w+)", line):
                job.entries.add(f".venv: {cmd}")
            if re.search(r"(?<![\w/.])python -c ", line):
                job.entries.add("python: -c")
    return job


def all_jobs() -> list[Job]:
    jobs = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, spec in yaml.safe_load(path.read_text())["jobs"].items():
            jobs.append(parse_job(path.name, name, spec))
    assert len(jobs) >= 2, f"no workflow jobs in {WORKFLOWS}"
    return jobs


def _clean_env(**extra: str) -> dict:
    """The environment a runner's step sees: nothing that points Python at this interpreter's packages."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "TORCH_INDEX", "PYTEST_ADDOPTS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, **extra}


def _key(*parts: str) -> str:
    """A hash of what decides a venv's contents: the files that say what is installed, the Python, ``parts``."""
    h = hashlib.sha256()
    for p in ("Makefile", "pyproject.toml", "constraints.txt"):
        h.update((ROOT / p).read_bytes())
    h.update("\0".join([sys._base_executable, sys.version, *parts]).encode())
    return h.hexdigest()[:12]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.utime(lock.fileno())  # the lock's mtime is the venv's last use (_prune keeps the newest)
        yield


def _prune(keep: Path) -> None:
    """Remove the venvs of ``keep``'s kind (its name less the key) unused for PRUNE_AFTER_S: built for other
    contents (an older constraints.txt, another clone's edit). A venv is used under its lock (``_locked``),
    whose mtime is its last use; one in use now is never removed."""
    prefix = keep.name[: -len(_key())]
    for old in keep.parent.glob(prefix + "*"):
        lock_path = old.with_suffix(".lock")
        if old == keep or not old.is_dir() or not re.fullmatch(re.escape(prefix) + "[0-9a-f]{12}", old.name):
            continue
        if lock_path.exists() and time.time() - lock_path.stat().st_mtime < PRUNE_AFTER_S:
            continue
        with open(lock_path, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another test run is using it
            shutil.rmtree(old, ignore_errors=True)
            lock_path.unlink(missing_ok=True)


def _copy_checkout(ws: Path) -> None:
    """ws holds a copy of the checkout (less KEEP) around its own .venv; the previous copy and job outputs go.
    A copy, not links: the editable install resolves links, and would then import the first clone's code."""
    for p in list(ws.iterdir()):
        if p.name == ".venv" or p.name.endswith(".egg-info"):
            continue
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    for p in ROOT.iterdir():
        if p.name in KEEP or p.name.endswith(".egg-info"):
            continue
        if p.is_symlink():  # workbench_ci, workbench_kernels: links to the folders, kept as links
            (ws / p.name).symlink_to(os.readlink(p))
        else:
            shutil.copytree(p, ws / p.name, symlinks=True) if p.is_dir() else shutil.copy2(p, ws / p.name)


def _python_venv(packages: tuple[str, ...]) -> Path:
    """The runner's `python` after the job's pip install (a plain venv when it installs nothing)."""
    venv = CACHE / f"python-{'-'.join(packages) or 'bare'}-{_key(*packages)}"
    with _locked(venv):
        if not (venv / ".installed").is_file():
            shutil.rmtree(venv, ignore_errors=True)
            _prune(venv)
            subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=300)
            if packages:
                pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c", "constraints.txt", *packages]
                subprocess.run(pip, cwd=ROOT, env=_clean_env(), check=True, timeout=1800)
            (venv / ".installed").touch()
    return venv


@dataclass
class Run:
    """A job's workspace (a checkout mirror with its .venv) and the runner's python."""

    job: Job
    ws: Path
    python: Path
    tmp: Path
    ran: set[str] = field(default_factory=set)

    def env(self, **extra: str) -> dict:
        path = f"{self.python / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
        summary = self.tmp / "step_summary.md"
        return _clean_env(PATH=path, GITHUB_WORKSPACE=str(self.ws), GITHUB_STEP_SUMMARY=str(summary), **extra)

    def step(self, prefix: str, env: dict[str, str], entry: str, expect_rc: int = 0, extra: dict | None = None):
        """The step's own run text under bash -e, with ``env`` for exactly the step's env keys."""
        step = self.job.step(prefix)
        assert set(env) == set(step.get("env", {})), (prefix, sorted(step.get("env", {})))
        assert "${{" not in step["run"], f"{prefix}: a template in run text is not run here"
        res = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=self.ws,
            env=self.env(**env, **(extra or {})),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert res.returncode == expect_rc, (
            f"{self.job.name}: {prefix}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
        )
        self.ran.add(entry)
        return res

    def call(self, args: list[str], entry: str, expect_rc: int = 0) -> subprocess.CompletedProcess:
        res = subprocess.run(args, cwd=self.ws, env=self.env(), capture_output=True, text=True, timeout=900)
        assert res.returncode == expect_rc, (
            f"{self.job.name}: {args}: exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
        )
        self.ran.add(entry)
        return res


@contextmanager
def job_run(job: Job, tmp: Path) -> Iterator[Run]:
    """The job's venvs (built once per contents, then reused) and a fresh workspace, emptied afterwards."""
    python = _python_venv(job.pip or ())
    if job.venv_extras is None:
        ws = tmp / "ws"
        ws.mkdir()
        for p in ROOT.iterdir():  # no .venv here: links to the checkout are the checkout
            if p.name not in KEEP and not p.name.endswith(".egg-info"):
                (ws / p.name).symlink_to(p)
        yield Run(job, ws, python, tmp)
        return
    ws = CACHE / f"ws-{job.venv_extras}-{_key(str(job.venv_extras))}"
    with _locked(ws):
        ws.mkdir(parents=True, exist_ok=True)
        _copy_checkout(ws)
        stamp = ws / ".venv" / ".installed"
        if stamp.is_file():  # the key is the stamp's inputs' contents: the copies' newer mtimes change nothing
            stamp.touch()
        else:
            _prune(ws)
            make = ["make", "venv", f"EXTRAS={job.venv_extras}"]
            res = subprocess.run(make, cwd=ws, env=_clean_env(), capture_output=True, text=True, timeout=3600)
            assert res.returncode == 0, f"{job.name}: {make}: exit {res.returncode}\n{res.stderr[-5000:]}"
        try:
            yield Run(job, ws, python, tmp)
        finally:
            for p in ws.iterdir():  # the job's outputs and the copy go; the venv stays
                if not (p.name == ".venv" or p.name.endswith(".egg-info")):
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


# ---- small inputs


def tiny_matrix(path: Path, n: int = 3) -> Path:
    """n fixture cells (fixture_ok.ipynb: a fast fake ok run with its greedy reference)."""
    cells = [
        {
            "name": f"fine-{i}",
            "notebook": str(FIXTURES / "fixture_ok.ipynb"),
            "parameters": {"tag": str(i)},
            "expect": "ok",
        }
        for i in range(n)
    ]
    path.write_text(json.dumps({"timeouts": {"cell_s": 120, "notebook_s": 240, "start_s": 120}, "cells": cells}))
    return path


def shard_results(out: Path, matrix: Path, n: int) -> None:
    """Cell results as the shard jobs upload them (out/shard-i), written by this interpreter's runner."""
    for i in range(1, n + 1):
        assert nightly.main(["--matrix", str(matrix), "--shard", f"{i}/{n}", "--out", str(out / f"shard-{i}")]) == 0


# ---- each job's plan: what it runs, on what


def plan_shard(r: Run) -> None:
    matrix = tiny_matrix(r.tmp / "matrix.json")
    for i in (1, 2):
        r.step(
            "Run shard",
            {"MATRIX": str(matrix), "SHARD": f"{i}/2", "OUT": f"shard-{i}"},
            ".venv: -m workbench_ci.nightly",
        )
        doc = json.loads((r.ws / f"shard-{i}" / "results.json").read_text())
        assert doc["shard"] == f"{i}/2" and all(c["verdict"] == "expected" for c in doc["cells"])


def plan_network(r: Run) -> None:
    matrix = tiny_matrix(r.tmp / "matrix.json", n=2)
    env = {"MATRIX": str(matrix), "SHARD": "1/1", "OUT": "network-1/cells", "PIP_NO_CACHE_DIR": "1"}
    r.step("Network cells", env, ".venv: -m workbench_ci.nightly")
    assert (r.ws / "network-1" / "cells" / "results.json").is_file()
    shards = []
    for i in (1, 2, 3):  # every network and nightly test, collected (not run) per shard: the dev venv imports them
        env = {"TESTS": "tests/", "SHARD": f"{i}/3", "JUNIT": f"network-{i}/network-tests.xml"}
        env |= {"WB_NETWORK_TESTS": "1", "WB_NIGHTLY_TESTS": "1", "PIP_NO_CACHE_DIR": "1"}
        res = r.step("Network tests", env, ".venv: -m pytest", extra={"PYTEST_ADDOPTS": "--collect-only"})
        shards.append({x for x in res.stdout.splitlines() if x.startswith("tests/")})
        assert (r.ws / env["JUNIT"]).is_file()
    assert all(shards) and sum(map(len, shards)) == len(set().union(*shards)), "the shards overlap or one is empty"
    assert {
        "tests/upstream/static/test_upstream_recall.py",
        "tests/upstream/test_guard_e2e_network.py",
        "tests/upstream/static/test_upstream_survey.py",
    } <= {x.split("::")[0] for x in set().union(*shards)}


def _lint_toy(r: Run) -> None:
    """The guard's CLI offline: lint of the toy regressed checkout, gate and SARIF (no replay venv)."""
    cache = write_fake_cache(r.tmp, {})
    tree = toy_tree(with_field=False).write(r.tmp / "regressed")
    triage = r.tmp / "triage.json"
    triage.write_text(json.dumps({"schema": "upstream-triage/3", "produced_by": {}, "entries": {}}))
    args = [str(r.ws / ".venv/bin/workbench"), "upstream", "--cache-dir", str(cache), "lint", "--sglang-src", str(tree)]
    args += ["--fail-on", "new", "--triage", str(triage), "--sarif", "guard.sarif"]
    res = r.call(args, ".venv: workbench upstream lint", expect_rc=1)
    assert "FAIL toy|IDLE|DraftExtendInput|kv_indptr" in res.stdout
    assert json.loads((r.ws / "guard.sarif").read_text())["runs"][0]["results"], "the SARIF has no result"


def plan_guard(r: Run) -> None:
    _lint_toy(r)
    r.ran.discard(".venv: workbench upstream lint")  # the guard job's own command is the lane (NOT_RUN)
    (r.ws / "guard").mkdir()
    shutil.copy(FIXTURES / "upstream_lane.json", r.ws / "guard" / "upstream_lane.json")
    r.step("Job summary", {}, "python: -c")
    assert (r.tmp / "step_summary.md").read_text() == "guard lane: pass\n"


def plan_merge(r: Run) -> None:
    matrix = tiny_matrix(r.tmp / "matrix.json")
    shard_results(r.ws / "shards", matrix, 2)
    shard_results(r.tmp / "net", tiny_matrix(r.tmp / "net-matrix.json", n=1), 1)  # one cell: one kernel, not three
    (r.ws / "network" / "network-1").mkdir(parents=True)
    shutil.move(r.tmp / "net" / "shard-1", r.ws / "network" / "network-1" / "cells")
    (r.ws / "history").mkdir()  # the history restore step's mkdir (its gh calls need GitHub)
    (r.ws / "lane").mkdir()
    shutil.copy(FIXTURES / "upstream_lane.json", r.ws / "lane" / "upstream_lane.json")  # the recorded lane night
    r.step("Merge shards", {}, "python: -m workbench_ci.nightly")
    report = (r.ws / "nightly" / "report.html").read_text()
    assert "Upstream guard lane: sglang 0.5.23 PASS" in report and (r.ws / "nightly" / "junit.xml").is_file()
    assert json.loads((r.ws / "nightly" / "summary.json").read_text())["shards"] == ["1/2", "2/2"]
    r.step("Merge the network shards", {}, "python: -m workbench_ci.nightly")
    assert json.loads((r.ws / "nightly" / "network" / "summary.json").read_text())["verdict"] == "pass"


def plan_nothing(r: Run) -> None:
    assert r.job.venv_extras is None and r.job.pip is None  # gh, jq and actions only


def plan_test(r: Run) -> None:
    # make test as the job runs it, collecting every test module (not running them: that is make test itself)
    res = r.step("make test", {"WB_REQUIRE_BROWSER": "1"}, "make test", extra={"PYTEST_ADDOPTS": "--collect-only"})
    assert re.search(r"\d+ tests collected", res.stdout), res.stdout[-2000:]


def plan_gate(r: Run) -> None:
    _lint_toy(r)


PLANS: dict[tuple[str, str], Callable[[Run], None]] = {
    ("nightly.yml", "shard"): plan_shard,
    ("nightly.yml", "network"): plan_network,
    ("nightly.yml", "guard"): plan_guard,
    ("nightly.yml", "merge"): plan_merge,
    ("nightly.yml", "pages"): plan_nothing,
    ("nightly.yml", "notify"): plan_nothing,
    ("pull-request.yml", "test"): plan_test,
    ("pull-request.yml", "guard-gate"): plan_gate,
}


@pytest.mark.parametrize("job", all_jobs(), ids=lambda j: f"{j.workflow}:{j.name}")
def test_every_job_runs_in_a_venv_of_what_it_installs(job: Job, tmp_path: Path) -> None:
    plan = PLANS.get((job.workflow, job.name))
    assert plan is not None, f"{job.workflow} {job.name}: no plan in PLANS runs this job"
    with job_run(job, tmp_path) as r:
        plan(r)
    skipped = {e for (w, n, e) in NOT_RUN if (w, n) == (job.workflow, job.name)}
    assert r.ran | skipped == job.entries and not r.ran & skipped, (job.entries, r.ran, skipped)


def test_the_old_merge_install_fails_here(tmp_path: Path) -> None:
    """The merge install the example workflow had (matplotlib pyyaml) cannot import the merge: this test sees it."""
    merge = next(j for j in all_jobs() if (j.workflow, j.name) == ("nightly.yml", "merge"))
    old = Job("nightly.yml", "merge (old install)", merge.spec, pip=("matplotlib", "pyyaml"), entries=merge.entries)
    with job_run(old, tmp_path) as r:
        shard_results(r.ws / "shards", tiny_matrix(tmp_path / "matrix.json", n=1), 1)
        (r.ws / "history").mkdir()
        res = r.step("Merge shards", {}, "python: -m workbench_ci.nightly", expect_rc=1)
    assert re.search(r"ModuleNotFoundError: No module named '(pygments|tqdm)'", res.stderr), res.stderr[-2000:]


@pytest.mark.network
@pytest.mark.timeout(3600)
def test_the_guard_jobs_lane_runs_in_its_venv(tmp_path: Path) -> None:
    """The guard job's lane step as written, in the job's venv: it runs (pass or fail, never "could not run")."""
    guard = next(j for j in all_jobs() if (j.workflow, j.name) == ("nightly.yml", "guard"))
    with job_run(guard, tmp_path) as r:
        (r.ws / "guard-history").mkdir()  # the history restore step's mkdir (its gh calls need GitHub)
        step = guard.step("The guard's lane")
        res = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=r.ws,
            env=r.env(**step["env"]),
            capture_output=True,
            text=True,
            timeout=3000,
        )
        assert res.returncode in (0, 1), f"the lane could not run (exit {res.returncode}):\n{res.stderr[-5000:]}"
        night = json.loads((r.ws / "guard" / "upstream_lane.json").read_text())
        assert night["verdict"] == ("pass" if res.returncode == 0 else "fail") and night["findings"]
        r.step("Job summary", {}, "python: -c")
        assert (r.tmp / "step_summary.md").read_text() == f"guard lane: {night['verdict']}\n"
