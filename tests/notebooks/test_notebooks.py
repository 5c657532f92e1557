"""The notebooks: committed clean and in sync with their paired .py, and each one run through
papermill on tiny settings writes the notebook record it promises (shipped models; WB_MODEL_DIR overrides)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest
import yaml

from workbench.notebook import load_record
from workbench.views import plots
from workbench_ci.kernelspec import KernelSpecError, kernel_name

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
FIXTURES = ROOT / "tests" / "fixtures"
ENGINE_NAMES = ["01_reproduce_crash", "02_apply_fix", "03_backend_comparison", "05_debug_crash"]
NAMES = sorted(ENGINE_NAMES + ["04_upstream_replay", "06_real_runtime", "07_debug_real_runtime"])
TINY = dict(steps=3, topk=2, draft_tokens=4, num_prompts=1, max_new_tokens=8, model_dir=os.environ.get("WB_MODEL_DIR"))
CRASH = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"


def _cells(nb) -> list:
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def test_every_notebook_is_paired():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(p.stem for p in NOTEBOOKS.glob("*.py")) == NAMES


ALL_IPYNB = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(FIXTURES.glob("*.ipynb"))


@pytest.mark.parametrize("path", ALL_IPYNB, ids=lambda p: p.name)
def test_committed_without_outputs(path):
    """An executed notebook committed by mistake (outputs, counts, papermill's injected cell or its
    metadata) fails here; pre-commit strips them before a commit (.pre-commit-config.yaml)."""
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, f"{path.name} is committed with outputs"
        assert "injected-parameters" not in c.metadata.get("tags", []), f"{path.name} is a papermill output"
    assert "papermill" not in nb.metadata and "widgets" not in nb.metadata, f"{path.name} was executed"
    assert sum("parameters" in c.metadata.get("tags", []) for c in nb.cells) == 1
    assert {"record_path", "expect"} <= set(papermill.inspect_notebook(str(path)))
    assert nb.metadata.get("language_info", {}).get("name") == "python", f"{path.name} has no language_info"


def _hooks() -> dict[str, list[str]]:
    """The pre-commit hooks' commands (id -> argv, the tool from this venv)."""
    cfg = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in cfg["repos"] for h in repo["hooks"]}
    pins = {
        line.split("==")[0].lower().replace("_", "-"): line for line in (ROOT / "constraints.txt").read_text().split()
    }
    for h in hooks.values():
        for dep in h.get("additional_dependencies", []):
            assert pins.get(dep.split("==")[0]) == dep, f"hook {h['id']}: {dep} is not the constraints.txt pin"
    bindir = Path(sys.executable).parent
    return {k: [str(bindir / shlex.split(h["entry"])[0]), *shlex.split(h["entry"])[1:]] for k, h in hooks.items()}


def test_pre_commit_strips_an_executed_notebook_and_syncs_a_pair(tmp_path):
    """An executed notebook fails the clean check; the configured nbstripout hook makes it pass; the
    jupytext hook carries an edit of a .py into its .ipynb."""
    bindir = Path(sys.executable).parent
    valid = subprocess.run([str(bindir / "pre-commit"), "validate-config", str(ROOT / ".pre-commit-config.yaml")])
    assert valid.returncode == 0
    hooks = _hooks()
    out = tmp_path / "ran.ipynb"
    papermill.execute_notebook(
        str(FIXTURES / "fixture_ok.ipynb"),
        str(out),
        kernel_name=kernel_name(),
        progress_bar=False,
        parameters={"record_path": str(tmp_path / "r.json")},
    )
    with pytest.raises(AssertionError, match="committed with outputs|papermill output|was executed"):
        test_committed_without_outputs(out)
    subprocess.run([*hooks["nbstripout"], str(out)], check=True)
    nb = nbformat.read(out, as_version=4)
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    nbformat.write(nb, out)  # papermill's injected cell is source: the check names it, a person removes it
    test_committed_without_outputs(out)
    for ext in ("py", "ipynb"):
        shutil.copy(NOTEBOOKS / f"01_reproduce_crash.{ext}", tmp_path / f"01_reproduce_crash.{ext}")
    py = tmp_path / "01_reproduce_crash.py"
    py.write_text(py.read_text().replace("# # 01 · Reproduce", "# # 01 · Reproduce (edited)"))
    subprocess.run([*hooks["jupytext-sync"], str(py)], check=True, capture_output=True)
    assert _cells(jupytext.read(py)) == _cells(nbformat.read(py.with_suffix(".ipynb"), as_version=4))
    assert "(edited)" in nbformat.read(py.with_suffix(".ipynb"), as_version=4).cells[0].source


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_documented_for_papermill(name):
    """``papermill --help-notebook`` shows every assignment of the parameters cell with its type and help
    (a help text papermill cannot parse drops the parameter: the nightly would then refuse it)."""
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = [line.split("=")[0].split(":")[0].strip() for line in cell.source.splitlines() if "=" in line]
    params = papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    assert list(params) == assigned
    for p in params.values():
        assert p["inferred_type_name"] not in ("None", "Unknown type") and len(p["help"]) > 10, p


@pytest.mark.parametrize("name", NAMES)
def test_in_sync_with_paired_py(name):
    assert _cells(jupytext.read(NOTEBOOKS / f"{name}.py")) == _cells(
        nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    ), f"{name}.ipynb and {name}.py differ: run `jupytext --sync notebooks/{name}.py`"
    params = papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    if name in ENGINE_NAMES:
        assert {"steps", "topk", "draft_tokens", "max_new_tokens", "dp_policy", "revision"} <= set(params)
        assert ("dp" in params) == (name != "03_backend_comparison")  # 03 takes its DP sizes as compare_dps
    elif name == "06_real_runtime":
        assert {"release", "backend", "roles", "live"} <= set(params)
    elif name == "07_debug_real_runtime":
        # runs on a release's kernel: tests/upstream/runtime/test_runtime_bundle_network.py
        assert {"release", "sglang_src", "run_fixes", "replay_fix"} <= set(params)
    else:
        assert {"releases", "replay_releases", "live"} <= set(params)


def _run(name: str, tmp_path: Path, **params) -> tuple:
    record = tmp_path / f"{name}.json"
    out = tmp_path / f"{name}.ipynb"
    base = TINY if name in ENGINE_NAMES else {}
    papermill.execute_notebook(
        str(NOTEBOOKS / f"{name}.ipynb"),
        str(out),
        cwd=str(ROOT),
        progress_bar=False,
        kernel_name=kernel_name(),
        execution_timeout=300,
        parameters={**base, **params, "record_path": str(record)},
    )
    return load_record(record), nbformat.read(out, as_version=4)


def _outputs(nb, kind: str) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == kind]


def test_01_shows_the_crash_as_data(tmp_path):
    record, nb = _run(
        "01_reproduce_crash",
        tmp_path,
        backend="triton",
        revision="pr-24860",
        dp=2,
        dp_policy="pack",
        compare_backends=["fa3"],
        expect="crashed",
    )
    run = record["runs"][record["primary"]]
    assert record["status"] == run["status"] == "crashed"
    crash = run["crash"]
    assert (crash["rank"], crash["phase"], crash["forward_mode"], crash["exception_type"]) == (
        1,
        "draft-extend",
        "IDLE",
        "AttributeError",
    )
    assert CRASH in crash["message"] and "init_forward_metadata" in crash["traceback"]
    assert record["runs"]["eagle/fa3"]["status"] == "ok"
    assert not _outputs(nb, "error"), "a crash must be shown as data, not a failed cell"
    text = "".join(o.get("text", "") for o in _outputs(nb, "stream"))
    assert CRASH in text and "init_forward_metadata" in text
    assert _outputs(nb, "display_data"), "the crash matrix is displayed"


def test_02_fix_is_lossless_and_undo_brings_the_crash_back(tmp_path):
    record, _ = _run(
        "02_apply_fix", tmp_path, backend="triton", revision="pr-24860", dp=2, dp_policy="pack", expect="ok"
    )
    ref, fixed, undo = (record["runs"][k] for k in ("reference", "fixed", "undo"))
    assert record["primary"] == "fixed"
    assert ref["status"] == fixed["status"] == "ok"
    assert fixed["config"]["apply_fix_in_place"] and fixed["config"]["revision"] == "pr-24860"
    assert fixed["outputs_sha256"] == ref["outputs_sha256"] and fixed["outputs"] == ref["outputs"]
    assert undo["status"] == "crashed" and undo["crash"]["exception_type"] == "AttributeError"
    assert not undo["config"]["apply_fix_in_place"]


@pytest.mark.nightly  # the longest notebook test; the nightly's papermill shards run notebook 03's cells too
def test_03_compares_backends_with_labelled_plots(tmp_path):
    record, nb = _run(
        "03_backend_comparison",
        tmp_path,
        backends=["fa3", "torch_native"],
        expect="ok",
        repeats=2,
        sweep_backends=["torch_native", "fa3"],
        sweep_dtypes=["float32"],
        sweep_num_prompts=1,
        sweep_max_new_tokens=8,
    )
    runs = record["runs"]
    assert sorted(runs) == sorted(
        f"{m}/{b}/dp1#{i}" for b in ("fa3", "torch_native") for m in ("eagle", "greedy") for i in (0, 1)
    )
    assert all(r["status"] == "ok" for r in runs.values())
    assert len({r["outputs_sha256"] for r in runs.values()}) == 1, "EAGLE3 must be lossless on every backend"
    assert runs["eagle/fa3/dp1#0"]["config"]["kernel_stand_in"] is True
    assert {r["backend"] for r in record["compare"]["rows"]} == {"fa3", "torch_native"}
    assert record["sweep"]["findings"] == [
        "float32: all 2 backends agree exactly (same tokens, same acceptance) at "
        "every setting; one curve stands for all; every output equals the fp32 "
        "greedy output."
    ]
    assert len(_outputs(nb, "display_data")) >= 8
    recs = list(runs.values())
    for fig in (
        plots.phase_latency(recs),
        plots.accept_length_hist(recs),
        plots.acceptance_per_position(recs),
        plots.speedup_intervals(record["compare"]),
        plots.crash_matrix(recs),
    ):
        texts = [t.get_text() for ax in fig.axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels(), ax.title)]
        texts += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        named = [t for t in texts if "fa3" in t]
        assert named and all("stand-in" in t for t in named), (fig.get_suptitle(), named)


def test_04_replays_the_real_releases_from_the_shipped_measurements(tmp_path):
    record, nb = _run("04_upstream_replay", tmp_path, live=False, expect="ok")
    runs = record["runs"]
    assert record["primary"] == "checks" and runs["checks"]["status"] == "ok" and runs["checks"]["problems"] == []
    for v in ("0.5.12", "0.5.13"):
        crash = runs[f"replay/{v}"]["crash"]
        assert runs[f"replay/{v}"]["status"] == "crashed" and crash["message"] == CRASH
        assert "sglang/srt/layers/attention/triton_backend.py" in crash["traceback"]
    assert runs["replay/0.5.14"]["status"] == "ok" and runs["replay/0.5.14"]["metrics"]["kv_indptr"] == [0, 1, 2]
    assert not _outputs(nb, "error") and len(_outputs(nb, "execute_result")) >= 5  # tables and the survey plot
    shown = json.dumps(nb["cells"])
    assert "shipped measurement of" in shown and "by eagle-workbench" in shown  # the reproducers, labelled
    assert "repro.py" in shown and "fix.diff" in shown and "unverified %" in shown


def test_06_shows_the_real_runtime_beside_the_engine_from_the_shipped_measurement(tmp_path):
    bundle, nb = _run("06_real_runtime", tmp_path, live=False, expect="ok")
    runs = bundle["runs"]
    assert bundle["primary"] == "checks" and runs["checks"]["status"] == "ok" and runs["checks"]["problems"] == []
    assert "shipped measurement" in runs["checks"]["config"]["source"]
    crash = runs["runtime/dp2"]["crash"]
    assert (crash["rank"], crash["phase"], crash["forward_mode"]) == (1, "verify", "IDLE")
    assert crash["message"] == "'EagleVerifyInput' object has no attribute 'kv_indptr'"
    assert "eagle_worker_v2.py" in crash["traceback"] and "triton_backend.py" in crash["traceback"]
    assert runs["runtime/between+verify-input"]["crash"]["message"] == CRASH
    assert runs["workbench/pr-24860"]["crash"]["message"] == CRASH and runs["workbench/pr-28221"]["status"] == "ok"
    text = "".join(o.get("text", "") for o in _outputs(nb, "stream"))
    assert "shipped measurement" in text and "eagle_worker_v2.py" in text
    # 3b: 0.5.12's V1 worker reaches the seed's crash (shipped, labelled with its own part's commit)
    assert "sglang 0.5.12" in text and "speculative/eagle_worker.py" in text
    assert "in forward_draft_extend_after_decode" in text and CRASH in text
    # 3c: 0.5.23's idle verify crash at the guard's read; 5b: its device equivalences with their lines
    assert "sglang 0.5.23" in text and "sglang/srt/layers/attention/triton_backend.py:891" in text
    shown = json.dumps(nb["cells"])
    assert "dp-padding-fill-value" in shown and "forward_batch_info.py:2013-2017" in shown
    assert "verify-tree-mask-mode" in shown and "eagle_utils.py:135" in shown
    assert not _outputs(nb, "error")


def test_require_rejects_a_bad_expect():
    from workbench.notebook import ExpectationError, require

    cfg = {"backend": "fa3", "revision": "pr-28221", "dp": 1}
    rec = {"status": "ok", "config": cfg, "crash": None, "metrics": {}, "outputs": [], "outputs_sha256": "a", "env": {}}
    assert "met" in require("ok", rec)  # a run record's JSON form reads as the record
    with pytest.raises(ExpectationError, match="expect='crashed'"):
        require("crashed", rec)
    with pytest.raises(ExpectationError, match="outputs differ"):
        require("ok", rec, same_outputs_as={**rec, "outputs_sha256": "b"})
    with pytest.raises(ValueError, match="valid: crashed, ok, any"):
        require("pass", rec)


def test_notebooks_run_on_the_venvs_own_kernel(tmp_path, monkeypatch):
    import json
    import sys

    assert kernel_name() == "eagle-workbench"  # installed by make venv, bound to this interpreter
    other = tmp_path / "kernels" / "eagle-workbench"
    other.mkdir(parents=True)
    other.joinpath("kernel.json").write_text(
        json.dumps(
            {
                "argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "elsewhere",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))  # searched first, as a user-level spec would be
    with pytest.raises(KernelSpecError, match=f"runs '/usr/bin/python3', not this interpreter '{sys.executable}'"):
        kernel_name()
    # the nightly refuses too, as a usage error, before any notebook starts
    from workbench_ci import nightly

    matrix = tmp_path / "m.json"
    matrix.write_text(
        json.dumps(
            {
                "cells": [
                    {"name": "c", "notebook": "notebooks/04_upstream_replay.ipynb", "parameters": {}, "expect": "ok"}
                ]
            }
        )
    )
    assert nightly.main(["--matrix", str(matrix), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out" / "notebooks").exists()
