"""JupyterLab in a real browser on a release's own kernel: notebook 07 opened on ``sglang-0.5.14``
(registered by ``workbench upstream kernel`` in the server's Jupyter folder), run from the UI up to
its fix (the run, the rank's bundle, the replay at the run's line), then the visual debugger on, a
breakpoint clicked in SGLang's ``triton_backend.py`` at the line the run raised on (in
``init_forward_metadata``), ``replay_bundle(path)`` run in a new cell: the call stack stops there
and the Variables panel shows the spec input, an ``EagleVerifyInput`` without ``kv_indptr``;
continued, the cell raises the run's error. Network (the release's wheel and environment), as
tests/notebooks/test_lab_browser.py otherwise: the same server set-up, the browser its ``find_browser`` finds
(``WB_CHROMIUM``, Debian's chromium, ...), screenshots under ``artifacts/lab/``, no process left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from test_lab_browser import REQUIRE_ENV, SHOTS, STATE_JS, _lab_env, _stop, _wait_http, find_browser, start_lab

from workbench.upstream.context import UpstreamContext

pytestmark = pytest.mark.network
ROOT = Path(__file__).resolve().parents[2]
COPIES = SHOTS / "runtime-notebooks"  # inside the served root
NAME = "07_debug_real_runtime"
VERIFY = "'EagleVerifyInput' object has no attribute 'kv_indptr'"
MODULE = "sglang.srt.layers.attention.triton_backend"
RUN_TIMEOUT_S = 400

RUN_ABOVE_FIX_JS = """() => {
  const app = window.jupyterapp, nb = app.shell.currentWidget.content;
  const at = nb.widgets.findIndex(c => c.model.sharedModel.getSource().startsWith('fixed = replay_result'));
  nb.activeCellIndex = at;
  app.shell.activateById(app.shell.currentWidget.id);
  app.commands.execute('notebook:run-all-above');
  return nb.widgets.slice(0, at).filter(c => c.model.type === 'code').length;
}"""
REPLAY_JS = """() => {
  const app = window.jupyterapp, nb = app.shell.currentWidget.content;
  nb.activeCellIndex = nb.widgets.length - 1;
  return app.commands.execute('notebook:insert-cell-below').then(() => {
    nb.activeCell.model.sharedModel.setSource('replay_bundle(path)  # stops at the breakpoint');
    app.commands.execute('notebook:run-cell');  // not awaited: the cell waits at the breakpoint
    return true;
  });
}"""


def _state(page) -> dict:
    return page.evaluate(STATE_JS)


def _run_to_the_fix(page, base: str, token: str) -> tuple[dict, str]:
    page.goto(f"{base}/lab/workspaces/{NAME}/tree/{COPIES.relative_to(ROOT)}/{NAME}.ipynb?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60_000)
    end = time.monotonic() + 240  # the release kernel imports torch and applies the shims at start
    while not (_state(page)["ready"] and _state(page)["status"] == "idle"):
        assert time.monotonic() < end, f"the release kernel never became ready: {_state(page)}"
        time.sleep(1)
    wanted = page.evaluate(RUN_ABOVE_FIX_JS)
    end = time.monotonic() + RUN_TIMEOUT_S
    while True:
        st = _state(page)
        if st["status"] == "idle" and (st["done"] >= wanted or st["errors"]):
            return st, page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.text_content()
        assert time.monotonic() < end, f"not finished after {RUN_TIMEOUT_S} s: {st}"
        time.sleep(1)


def _breakpoint_stop(page, line: str) -> tuple[str, list]:
    """Debugger on, SGLang's triton_backend from Kernel Sources, a breakpoint at ``line``, the replay in a
    new cell; returns the top frame of the call stack and the Variables panel's text and names."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-DebuggerBugButton button").first.click()
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-DebuggerBugButton [aria-pressed='true']").first.wait_for()
    page.evaluate("() => window.jupyterapp.commands.execute('debugger:show-panel')")
    sources = page.locator("input[placeholder='Filter sources']").first
    sources.wait_for(timeout=30_000)
    sources.fill(MODULE)
    page.locator(".jp-DebuggerKernelSource-source", has_text=re.compile(f"^{re.escape(MODULE)}$")).first.click()
    editor = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .cm-editor").last
    number = editor.locator(".cm-lineNumbers .cm-gutterElement", has_text=re.compile(f"^{line}$"))
    breakpoint_set = page.locator(".jp-DebuggerBreakpoint", has_text=line).first
    editor.locator(".cm-lineNumbers .cm-gutterElement", has_text=re.compile("^2$")).first.wait_for(timeout=30_000)
    height = editor.locator(".cm-lineNumbers .cm-gutterElement", has_text=re.compile("^2$")).first.bounding_box()
    for _ in range(20):  # CodeMirror renders the lines in view only: scroll the long module to the line
        if number.count():
            break
        editor.locator(".cm-scroller").first.evaluate(
            "(el, y) => { el.scrollTop = y; }", max(0, (int(line) - 15) * height["height"])
        )
        page.wait_for_timeout(500)
    for _ in range(5):  # the source editor lays out after it opens: a click before that lands nowhere
        if breakpoint_set.count():
            break
        number.scroll_into_view_if_needed()
        row, gutter = number.bounding_box(), editor.locator(".cm-breakpoint-gutter").first.bounding_box()
        page.mouse.click(gutter["x"] + gutter["width"] / 2, row["y"] + row["height"] / 2)
        try:
            breakpoint_set.wait_for(timeout=2_000)
            break
        except PlaywrightTimeout:
            page.wait_for_timeout(500)
    breakpoint_set.wait_for(timeout=10_000)
    page.locator(".lm-TabBar-tab", has_text=f"{NAME}.ipynb").first.click()
    page.evaluate(REPLAY_JS)
    top = page.locator(".jp-DebuggerCallstackFrame").first
    top.wait_for(timeout=120_000)
    variables = page.locator(".jp-DebuggerVariables", has_text="spec_info").first
    variables.wait_for(timeout=10_000)
    page.locator(".jp-DebuggerVariables-name", has_text=re.compile("^spec_info$")).first.click()  # expand it
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "07-debugger.png"))
    names = page.locator(".jp-DebuggerVariables-name").all_text_contents()  # spec_info's attributes among them
    stopped, shown = top.text_content(), [variables.text_content(), names]
    page.evaluate("() => window.jupyterapp.commands.execute('debugger:continue')")
    return stopped, shown


def test_notebook_07_stops_in_sglangs_init_forward_metadata_in_jupyterlab(tmp_path: Path) -> None:
    browser_path, why = find_browser()
    if browser_path is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{why}; {REQUIRE_ENV}=1 requires this test")
        pytest.skip(f"browser test: {why}; {REQUIRE_ENV}=1 makes a missing browser a failure")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (never `playwright install`)")
    from workbench.upstream.runtime.kernel import register

    env = _lab_env(tmp_path / "jupyter")
    before = os.environ.get("JUPYTER_DATA_DIR")
    os.environ["JUPYTER_DATA_DIR"] = env["JUPYTER_DATA_DIR"]  # the kernelspec goes to the server's folder
    try:
        kernel = register(UpstreamContext(), "0.5.14")["name"]
    finally:
        if before is None:
            del os.environ["JUPYTER_DATA_DIR"]
        else:
            os.environ["JUPYTER_DATA_DIR"] = before
    shutil.rmtree(COPIES, ignore_errors=True)
    COPIES.mkdir(parents=True)
    nb = nbformat.read(ROOT / "notebooks" / f"{NAME}.ipynb", as_version=4)
    assert nb.metadata["kernelspec"]["name"] == kernel  # the notebook opens on the release's kernel
    nbformat.write(nb, COPIES / f"{NAME}.ipynb")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    server, base, token, log = start_lab(tmp_path, env)
    try:
        _wait_http(f"{base}/api/status?token={token}", server, log)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"], headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            st, text = _run_to_the_fix(page, base, token)
            assert st["kernel"] == kernel and not st["errors"], st
            assert "raised | same as the run: True" in text and VERIFY in text, "07: the replay at the run's line"
            page.screenshot(path=str(SHOTS / "07.png"))
            bundle = json.loads(
                next((COPIES / "runs" / "notebooks" / "07_bundles").glob("crash-bundle-rank1/bundle.json")).read_text()
            )
            line = str(bundle["raised_at"]["line"])
            stopped, shown = _breakpoint_stop(page, line)
            assert stopped.startswith("init_forward_metadata") and stopped.endswith(f"triton_backend.py:{line}"), (
                stopped
            )
            text, names = shown  # the frame's locals with spec_info expanded: its class, no kv_indptr entry
            assert "spec_infoEagleVerifyInput" in text, shown
            assert "draft_token_num" in names and "kv_indptr" not in names, names
            page.locator(".lm-TabBar-tab", has_text=f"{NAME}.ipynb").first.click()
            end = time.monotonic() + 120
            while not _state(page).get("errors"):  # continued: the read raises, in the new cell
                assert time.monotonic() < end, "07: the replay did not finish after the breakpoint"
                time.sleep(0.5)
            assert _state(page)["errors"] == [f"AttributeError: {VERIFY}"]
            browser.close()
    finally:
        left = _stop(server)
        shutil.rmtree(COPIES, ignore_errors=True)
    assert left == [], f"processes left behind: {left}"
    assert (SHOTS / "07-debugger.png").stat().st_size > 10_000
