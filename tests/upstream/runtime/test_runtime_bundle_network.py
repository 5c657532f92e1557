"""A real-runtime crash, its rank's bundle, and the replay in the release's own kernel (network: the
0.5.14 wheel, its release environment, ipykernel added to it). The run writes a bundle; in the kernel
``workbench upstream kernel`` registers, the replay raises the run's exception at the run's
triton_backend.py line, completes with the fix with the fixed run's metadata, and ``%debug`` stops
in SGLang's frame; the same for the between-PRs checkout's draft-extend crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workbench.debug.sglang_bundle import load_rank_bundle
from workbench.upstream.context import UpstreamContext
from workbench.upstream.runtime.suite import between_prs_checkout

pytestmark = pytest.mark.network
VERIFY = "'EagleVerifyInput' object has no attribute 'kv_indptr'"
SEED = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
TRITON = "sglang/srt/layers/attention/triton_backend.py"


class Kernel:
    """A started kernelspec and a way to run code in it (the cell's text output, errors included)."""

    def __init__(self, name: str):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name=name, startup_timeout=240)

    def run(self, code: str, answers: tuple[str, ...] = ()) -> str:
        out: list[str] = []
        pending = list(answers)

        def hook(msg: dict) -> None:
            c = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(c["text"])
            elif msg["msg_type"] == "execute_result":
                out.append(c["data"].get("text/plain", ""))
            elif msg["msg_type"] == "error":
                out.append(f"ERROR {c['ename']}: {c['evalue']}\n")

        def stdin(msg: dict) -> None:  # pdb's prompts under %debug
            out.append(msg["content"].get("prompt", ""))
            self.kc.input(pending.pop(0) if pending else "q")

        self.kc.execute_interactive(code, timeout=600, output_hook=hook, stdin_hook=stdin, allow_stdin=True)
        return "".join(out)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict:
    """Two runs (0.5.14 and the between-PRs checkout with verify-input), their bundles, two kernels."""
    from workbench.upstream.runtime import run_runtime
    from workbench.upstream.runtime.kernel import register

    root = tmp_path_factory.mktemp("lab")
    old = os.environ.get("JUPYTER_DATA_DIR")
    os.environ["JUPYTER_DATA_DIR"] = str(root / "jupyter")
    ctx = UpstreamContext()
    between = root / "between"
    between_prs_checkout(ctx, "0.5.14", between)
    out = {
        "release": run_runtime(ctx, "0.5.14", dp=2, reference=False, max_new_tokens=8, bundle_dir=root / "b1"),
        "between": run_runtime(
            ctx,
            "0.5.14",
            dp=2,
            fixes=["verify-input"],
            sglang_src=between,
            reference=False,
            max_new_tokens=8,
            bundle_dir=root / "b2",
        ),
        "kernels": {"release": register(ctx, "0.5.14")["name"], "between": register(ctx, "0.5.14", between)["name"]},
    }
    yield out
    if old is None:
        del os.environ["JUPYTER_DATA_DIR"]
    else:
        os.environ["JUPYTER_DATA_DIR"] = old


@pytest.mark.parametrize(
    "role, message, spec_class, fix",
    [("release", VERIFY, "EagleVerifyInput", "verify-input"), ("between", SEED, "EagleDraftExtendInput", "pr-28221")],
)
def test_the_bundle_replays_in_the_release_kernel_at_the_runs_line_and_completes_with_the_fix(
    lab: dict, role: str, message: str, spec_class: str, fix: str
) -> None:
    crash = lab[role]["crash"]
    assert lab[role]["status"] == "crashed" and crash["message"] == message and crash["rank"] == 1
    bundle = load_rank_bundle(crash["bundle"])
    assert bundle.meta["spec_info"]["class"] == spec_class and bundle.spec_missing == ["kv_indptr"]
    run_at = (crash["raised_at"]["file"], crash["raised_at"]["line"])
    assert run_at[0] == TRITON and (bundle.meta["raised_at"]["relative"], bundle.meta["raised_at"]["line"]) == run_at
    kernel = Kernel(lab["kernels"][role])
    try:
        path = crash["bundle"]
        got = kernel.run(
            "from workbench.debug.sglang_replay import replay_result\n"
            f"r = replay_result({path!r})\n"
            "e = r.exception\n"
            "print('OUT', r.status, r.same_as_run, e['type'], e['relative'], e['line'])\n"
            "print('MSG', e['message'])"
        )
        assert f"OUT crashed True AttributeError {run_at[0]} {run_at[1]}" in got, got
        assert f"MSG {message}" in got
        debug = kernel.run(
            f"from workbench.debug.sglang_replay import replay_bundle\nreplay_bundle({path!r})",
        )
        assert f"ERROR AttributeError: {message}" in debug, debug
        stop = kernel.run(
            "%debug",
            answers=(
                "p ('FRAME', __name__, type(spec_info).__name__, forward_batch.forward_mode.name, "
                "hasattr(spec_info, 'kv_indptr'))",
                "q",
            ),
        )
        mode = "IDLE"
        assert f"('FRAME', 'sglang.srt.layers.attention.triton_backend', '{spec_class}', '{mode}', False)" in stop, stop
        fixed = kernel.run(
            f"r = replay_result({path!r}, [{fix!r}])\nprint('FIXED', r.status, r.metadata_equal, r.differences, "
            "r.metadata['kv_indptr'])"
        )
        assert "FIXED ok True []" in fixed, fixed
    finally:
        kernel.close()


def test_notebook_07_runs_on_the_release_kernel_through_papermill(lab: dict, tmp_path) -> None:
    """The run, the bundle, the replay at the run's line, the fix and the reads, with expect=ok."""
    import json

    import papermill

    root = Path(__file__).resolve().parents[3]
    record = tmp_path / "07.json"
    papermill.execute_notebook(
        str(root / "notebooks" / "07_debug_real_runtime.ipynb"),
        str(tmp_path / "07.ipynb"),
        cwd=str(root),
        progress_bar=False,
        kernel_name=lab["kernels"]["release"],
        execution_timeout=600,
        parameters={"record_path": str(record), "expect": "ok"},
    )
    doc = json.loads(record.read_text())
    assert (
        all(doc["checks"].values())
        and doc["replay"]["exception"]["line"] == doc["runs"]["run"]["crash"]["raised_at"]["line"]
    )
    assert Path(doc["bundle"]).parent == tmp_path / "07_bundles"
