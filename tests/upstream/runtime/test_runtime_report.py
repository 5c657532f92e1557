"""The upstream-ready report without sglang: its claims' lines are read from a (stand-in) release and a
claim whose code is missing or ambiguous stops it; the fix is a diff that `patch` applies to the release
file; the traceback keeps no machine's folders; what the report does not show is named."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from upstream_fixtures import runtime_config

from workbench.upstream.runtime import release_record, report

SPEC = """from typing import Optional
import torch


@dataclass
class EagleVerifyInput(SpecInput):
    draft_token: torch.Tensor
    num_tokens_per_req: int = -1

    def __post_init__(self):
        pass
"""


def _stand_in_release(root: Path) -> Path:
    """A package folder holding each claim's code once, in its function (a stand-in for a release's sglang/)."""
    pkg = root / "sglang"
    files: dict[str, dict] = {}
    for _claim, rel, code, within in report.CLAIMS:
        files.setdefault(rel, {}).setdefault(within, []).append(f"_ = {code!r}")  # the code as text, parseable
    for rel, funcs in files.items():
        text = "x = 1\n" + "".join(f"{line}\n" for line in funcs.pop(None, []))
        for name, lines in funcs.items():
            text += f"def {name}():\n" + "".join(f"    {line}\n" for line in lines)
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_claim_lines_are_read_from_the_release(tmp_path: Path) -> None:
    pkg = _stand_in_release(tmp_path)
    got = report.claim_lines(pkg)
    assert len(got) == len(report.CLAIMS)
    assert got[0]["lines"] == ["sglang/srt/server_args.py:2"]  # line 1 is "x = 1"
    for c in got:
        rel, line = c["lines"][0].rsplit(":", 1)
        assert c["code"] in (tmp_path / rel).read_text().splitlines()[int(line) - 1]


def test_a_claim_missing_or_twice_in_its_function_stops_the_report(tmp_path: Path) -> None:
    pkg = _stand_in_release(tmp_path)
    hook = pkg / "srt/arg_groups/cuda_graph_hook.py"
    hook.write_text(hook.read_text().replace("if cfg.disable_cuda_graph:", "pass"))
    with pytest.raises(report.ReportError, match="is in sglang/srt/arg_groups/cuda_graph_hook.py parse_cuda_graph"):
        report.claim_lines(pkg)
    pkg = _stand_in_release(tmp_path / "twice")
    idle = pkg / "srt/model_executor/runner/eager_runner.py"
    code = "model_runner.attn_backend.init_forward_metadata(forward_batch)"
    idle.write_text(idle.read_text().replace(f"    _ = {code!r}\n", f"    _ = {code!r}\n" * 2))
    with pytest.raises(report.ReportError, match="2 time"):
        report.claim_lines(pkg)


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
def test_the_fix_is_a_diff_patch_applies_to_the_release_file(tmp_path: Path) -> None:
    after = report.fixed_text(SPEC)
    assert "    num_tokens_per_req: int = -1\n" + "\n".join(report.FIELD_LINES) + "\n" in after
    diff = report.unified_diff(SPEC, after)
    spec = tmp_path / report.SPEC_FILE
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC)
    (tmp_path / "fix.diff").write_text(diff)
    subprocess.run(["patch", "-p1", "-i", "fix.diff"], cwd=tmp_path, check=True, capture_output=True)
    assert spec.read_text() == after
    with pytest.raises(report.ReportError, match="already declares kv_indptr"):
        report.fixed_text(after)
    with pytest.raises(report.ReportError, match="no class EagleVerifyInput"):
        report.fixed_text("x = 1\n")


def test_traceback_paths_are_cut_below_the_package() -> None:
    text = (
        'File "/work/wt/x/workbench/upstream/runtime/release_rank.py", line 9, in main\n'
        'File "/root/.cache/v/lib/python3.11/site-packages/torch/c.py", line 2, in g\n'
        'File "/root/.cache/x/src/sglang-0.5.23/sglang/srt/a.py", line 3, in f\nFile "/usr/lib/b.py", line 1'
    )
    assert report.relative_traceback(text) == (
        'File "workbench/upstream/runtime/release_rank.py", line 9, in main\n'
        'File "site-packages/torch/c.py", line 2, in g\n'
        'File "sglang/srt/a.py", line 3, in f\nFile "/usr/lib/b.py", line 1'
    )


def test_what_the_report_does_not_show_is_named() -> None:
    crash = {
        "spec_info": "EagleVerifyInput",
        "phase": "verify",
        "forward_mode": "IDLE",
        "exception_type": "AttributeError",
    }
    fixed = {"status": "ok", "reference_equal": True}
    res = {"runs": {"as released": {"crash": crash}, "fixed": fixed}, "fixed_equals_dp1": True}
    assert report.confirmed(res) == []
    assert "not ok and equal" in report.confirmed({**res, "fixed_equals_dp1": False})[0]
    ok = {"runs": {"as released": {"crash": None, "status": "ok"}, "fixed": fixed}, "fixed_equals_dp1": True}
    assert "did not crash as" in report.confirmed(ok)[0]
    # A report that names the file the crash is raised in: another file is not the crash it reports.
    eagle = report.CRASHES["eagle-idle-draft-extend-empty-batch"].expect
    at = {"phase": "draft-extend", "forward_mode": "IDLE", "exception_type": "RuntimeError"}
    ran = {"as released": {"crash": {**at, "raised_at": "sglang/srt/layers/rotary_embedding/base.py:347"}}}
    res = {"expect": eagle, "runs": {**ran, "fixed": fixed}, "fixed_equals_dp1": True}
    assert report.confirmed(res) == []
    ran["as released"]["crash"]["raised_at"] = "sglang/srt/models/llama.py:246"
    assert "did not crash as" in report.confirmed(res)[0]


def test_a_run_is_summed_up_from_its_record() -> None:
    """``_summary`` reads a real-runtime record's fields: the crash where it was raised, or the reference."""
    cfg = runtime_config(timeout_s=60)
    rec = release_record.new(cfg)
    rec.status, rec.timings = "crashed", {"ranks_s": 12.5}
    at = {"file": "sglang/srt/layers/attention/triton_backend.py", "line": 593}
    rec.crash = release_record.RuntimeCrash(1, "verify", "IDLE", 1, "AttributeError", "m", spec_info="X", raised_at=at)
    s = report._summary(rec)
    assert s["status"] == "crashed" and s["ranks_s"] == 12.5 and s["reference_equal"] is None
    assert s["crash"] == {
        "rank": 1,
        "phase": "verify",
        "forward_mode": "IDLE",
        "batch_size": 1,
        "spec_info": "X",
        "exception_type": "AttributeError",
        "message": "m",
        "raised_at": "sglang/srt/layers/attention/triton_backend.py:593",
    }
    rec.status, rec.crash = "ok", None
    rec.reference = release_record.Reference(equal=True, outputs=[[1]])
    assert report._summary(rec)["crash"] is None and report._summary(rec)["reference_equal"] is True


@pytest.mark.network
@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
@pytest.mark.parametrize("name", list(report.CRASHES))
def test_each_report_claims_lines_and_fix_applies_to_0_5_23(name: str, tmp_path: Path) -> None:
    """On 0.5.23's own files: every claim's code is there once, each fix's diff ``patch -p1`` applies and gives
    the text the fixed run runs (which parses), and a fix applied twice stops with ReportError."""
    from workbench.upstream.context import UpstreamContext
    from workbench.upstream.sources.trees import release_tree

    crash = report.CRASHES[name]
    tree = release_tree(UpstreamContext(), "0.5.23")
    assert len(report.claim_lines(tree.root / "sglang", crash.claims)) == len(crash.claims)
    for file, fix in crash.fix:
        after = fix(tree.files[file])
        compile(after, file, "exec")
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_text(tree.files[file])
        (tmp_path / "fix.diff").write_text(report.unified_diff(tree.files[file], after, file))
        subprocess.run(["patch", "-p1", "-i", "fix.diff"], cwd=tmp_path, check=True, capture_output=True)
        assert (tmp_path / file).read_text() == after
        with pytest.raises(report.ReportError, match="nothing to fix"):
            fix(after)


def test_the_shipped_reports_load_and_show_one_row_each() -> None:
    """``load_reports`` reads every shipped folder's result.json (JSON only); ``reports_table`` shows each crash where
    it was raised, the files its fix changes, the fixed run and that no GPU ran the server command."""
    from workbench.views.runtime_explore import reports_table

    reports = report.load_reports()
    assert [r["folder"] for r in reports] == sorted(f"{name}-0.5.23" for name in report.CRASHES)
    rows = {row["report"]: row for row in reports_table(reports).rows}
    eagle = rows["eagle-idle-draft-extend-empty-batch-0.5.23"]
    assert eagle["raised at"] == "sglang/srt/layers/rotary_embedding/base.py:347"
    assert eagle["fix"] == "sglang/srt/models/llama.py, sglang/srt/models/llama_eagle.py"
    assert all(row["fixed run"] == "ok" and row["GPU tested"] == "no" for row in rows.values())
    assert all(report.confirmed(r) == [] for r in reports)
