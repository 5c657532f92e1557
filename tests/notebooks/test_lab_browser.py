"""JupyterLab in a real browser: notebooks 01 and 05 run from the UI in headless Chromium, and
notebook 05's visual-debugger recipe stops at a breakpoint on the failing line.

Starts JupyterLab as ``make lab`` does (the repository root served, the notebooks folder open: the
Makefile's ``--ServerApp`` / ``--LabApp`` flags) on 127.0.0.1 (a free port, a token, its own runtime/config/data
dirs and a kernelspec pointing at this Python, debugger on), opens copies of the notebooks under
``artifacts/lab/notebooks/`` (the repository's stay clean; ``TINY``'s small settings injected after
the parameters cell, as papermill does), runs all cells through the app's command registry, waits for
the kernel to go idle and checks the rendered page. Then, in 05: the debugger enabled from the
toolbar, the backend module opened from the Kernel Sources panel, a breakpoint clicked on the line
the notebook marked, ``workbench.replay_crash(bundle_path)`` run in a new cell: the call stack must
stop there. Screenshots go to ``artifacts/lab/``. The server and every process it started are
stopped at the end. Needs a Chromium-family browser: the one ``WB_CHROMIUM`` names, else the first of
``BROWSERS`` that exists (Debian's ``chromium``, which ``.ci/run`` installs; Ubuntu's
``chromium-browser``; Google Chrome, which GitHub's hosted runners ship). ``.ci/run`` and the
pull-request workflow set WB_REQUIRE_BROWSER=1; elsewhere a missing browser skips the test, reason
printed. Playwright for Python (dev extra) drives it; it never downloads a browser.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from workbench.run.dp.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
BROWSER_ENV = "WB_CHROMIUM"  # a browser's executable, tried before BROWSERS
BROWSERS = (
    "/usr/bin/chromium",  # Debian's package (.ci/run installs it)
    "/usr/bin/chromium-browser",  # Ubuntu's
    "/usr/bin/google-chrome",  # GitHub's hosted ubuntu runners
    "/usr/bin/google-chrome-stable",
    "/opt/google/chrome/chrome",
)
REQUIRE_ENV = "WB_REQUIRE_BROWSER"  # .ci/run sets it: there a missing browser fails instead of skipping
SHOTS = ROOT / "artifacts" / "lab"
COPIES = SHOTS / "notebooks"  # inside the served root, as the notebooks are under make lab
CRASH = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
RUN_TIMEOUT_S = 150
# The box is small: shorter generations, the same crash and pages; 01 compares one other backend (fa3, as the
# papermill test of 01 does), not three: its crash matrix still renders, at two DP runs fewer.
TINY = {
    "01_reproduce_crash": {"max_new_tokens": 8, "compare_backends": ["fa3"]},
    "05_debug_crash": {"max_new_tokens": 8},
}

STATE_JS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.sessionContext || !w.content) return {ready: false};
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  const outputs = cells.map(c => c.model.toJSON().outputs || []);
  return {ready: w.sessionContext.isReady && !!kernel, kernel: kernel ? kernel.name : null,
          status: kernel ? kernel.status : null, cells: cells.length,
          done: cells.filter(c => c.model.executionCount !== null).length,
          errors: outputs.flat().filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)};
}"""


def _lab_env(home: Path) -> dict:
    data = home / "data"
    spec = data / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (workbench venv)",
                "language": "python",
                "metadata": {"debugger": True},  # as ipykernel's own spec: the toolbar's debugger button
            }
        )
    )
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news toast over the screenshots (and no request to the news feed)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_PATH": str(data),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
    }
    env.pop("JUPYTER_CONFIG_PATH", None)
    return env


def _wait_http(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer {url} in {timeout_s} s:\n{log.read_text()[-3000:]}")


def _stop(server: subprocess.Popen) -> list:
    """Stop the server and everything it started; returns the pids still alive after."""
    procs = [server] if server.poll() is not None else [psutil.Process(server.pid)]
    try:
        procs = [psutil.Process(server.pid)] + psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        p.kill()
    _, alive = psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in alive]


def make_lab_flags() -> list[str]:
    """The ``--ServerApp`` / ``--LabApp`` flags of the Makefile's ``lab`` target (``$(CURDIR)``: the repository)."""
    recipe = (ROOT / "Makefile").read_text().split("\nlab:", 1)[1].split("\n\n", 1)[0]
    flags = re.findall(r"--(?:ServerApp|LabApp)\.\w+=\S+", recipe)
    assert any(f.startswith("--ServerApp.root_dir=") for f in flags), f"make lab sets no root_dir: {recipe}"
    return [f.replace("$(CURDIR)", str(ROOT)) for f in flags]


def _run_all(page, base: str, name: str, token: str) -> dict:
    """Open ``name`` alone (its own workspace), run all cells from the UI, wait for the kernel to go idle."""
    t0 = time.monotonic()
    page.goto(f"{base}/lab/workspaces/{name}/tree/{COPIES.relative_to(ROOT)}/{name}.ipynb?reset&token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget", timeout=60_000)
    end = time.monotonic() + 60
    while not page.evaluate(STATE_JS)["ready"]:
        assert time.monotonic() < end, f"{name}: the kernel never became ready: {page.evaluate(STATE_JS)}"
        time.sleep(0.5)
    page.evaluate("""() => { const app = window.jupyterapp; app.shell.activateById(app.shell.currentWidget.id);
                             return app.commands.execute('notebook:run-all-cells'); }""")
    end = time.monotonic() + RUN_TIMEOUT_S
    while True:
        st = page.evaluate(STATE_JS)
        if st["status"] == "idle" and (st["done"] == st["cells"] or st["errors"]):
            print(f"{name}: opened and ran all cells in {time.monotonic() - t0:.0f} s")
            return st
        assert time.monotonic() < end, f"{name}: not finished after {RUN_TIMEOUT_S} s: {st}"
        time.sleep(1)


def _text(page) -> str:
    return page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook").first.text_content()


DEBUG_JS = """() => {
  const app = window.jupyterapp, nb = app.shell.currentWidget.content;
  nb.activeCellIndex = nb.widgets.length - 1;
  return app.commands.execute('notebook:insert-cell-below').then(() => {
    nb.activeCell.model.sharedModel.setSource('workbench.replay_crash(bundle_path)  # stops at the breakpoint');
    app.commands.execute('notebook:run-cell');  // not awaited: the cell waits at the breakpoint
    return true;
  });
}"""


def _debugger_recipe(page, frame_text: str) -> tuple[str, str]:
    """Notebook 05's recipe: debugger on, the backend module opened from Kernel Sources, a breakpoint on
    the marked line, the replay run in a new cell; returns (the call stack's top frame where it stopped, path:line)."""
    path, line = re.search(r"(/\S+/workbench/backends/\w+\.py):(\d+) in init_forward_metadata", frame_text).groups()
    module = "workbench.backends." + Path(path).stem
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-DebuggerBugButton button").first.click()
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-DebuggerBugButton [aria-pressed='true']").first.wait_for()
    page.evaluate("() => window.jupyterapp.commands.execute('debugger:show-panel')")  # the sidebar, as the icon
    sources = page.locator("input[placeholder='Filter sources']").first  # the Kernel Sources panel's filter
    sources.wait_for(timeout=30_000)
    sources.fill(module)
    page.locator(".jp-DebuggerKernelSource-source", has_text=re.compile(f"^{re.escape(module)}$")).first.click()
    editor = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden) .cm-editor").last
    number = editor.locator(".cm-lineNumbers .cm-gutterElement", has_text=re.compile(f"^{line}$"))
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # the test needs playwright anyway

    breakpoint_set = page.locator(".jp-DebuggerBreakpoint", has_text=line).first
    for _ in range(5):  # the source editor lays out after it opens: a click before that lands nowhere
        if breakpoint_set.count():  # set by the previous click after all: another would clear it
            break
        number.scroll_into_view_if_needed()
        row, gutter = number.bounding_box(), editor.locator(".cm-breakpoint-gutter").first.bounding_box()
        page.mouse.click(gutter["x"] + gutter["width"] / 2, row["y"] + row["height"] / 2)  # the breakpoint
        try:
            breakpoint_set.wait_for(timeout=2_000)
            break
        except PlaywrightTimeout:
            page.wait_for_timeout(500)
    breakpoint_set.wait_for(timeout=10_000)
    page.locator(".lm-TabBar-tab", has_text="05_debug_crash.ipynb").first.click()
    page.evaluate(DEBUG_JS)
    top = page.locator(".jp-DebuggerCallstackFrame").first
    top.wait_for(timeout=60_000)
    page.locator(".jp-DebuggerVariables", has_text="spec_info").first.wait_for(timeout=10_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(SHOTS / "05-debugger.png"))
    stopped = top.text_content()
    page.evaluate("() => window.jupyterapp.commands.execute('debugger:continue')")
    return stopped, f"{path}:{line}"


def start_lab(tmp_path: Path, env: dict) -> tuple[subprocess.Popen, str, str, Path]:
    """JupyterLab with make lab's flags on a free loopback port, a fresh token, its settings and workspaces
    under ``tmp_path``, output to ``tmp_path/lab.log``; returns (server, base URL, token, log)."""
    port, token = free_port(), secrets.token_hex(16)
    log = tmp_path / "lab.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--IdentityProvider.token={token}",
                "--LabApp.expose_app_in_browser=True",
                *make_lab_flags(),
                "--ServerApp.port_retries=0",
                "--LabApp.news_url=None",
                f"--LabApp.user_settings_dir={tmp_path / 'jupyter' / 'settings'}",
                f"--LabApp.workspaces_dir={tmp_path / 'jupyter' / 'workspaces'}",
                *(["--allow-root"] if os.geteuid() == 0 else []),
            ],  # CI runs as root
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
        )
    return server, f"http://127.0.0.1:{port}", token, log


def find_browser() -> tuple[str | None, str]:
    """The browser's executable (WB_CHROMIUM when set, else the first of BROWSERS present), or why none."""
    named = os.environ.get(BROWSER_ENV)
    if named:
        if Path(named).is_file() and os.access(named, os.X_OK):
            return named, ""
        return None, f"{BROWSER_ENV}={named!r} is not an executable file"
    found = next((b for b in BROWSERS if Path(b).is_file() and os.access(b, os.X_OK)), None)
    why = (
        f"no browser at {', '.join(BROWSERS)}: install Debian's chromium (`apt-get install -y chromium`; "
        f".ci/run does) or name one with {BROWSER_ENV}=PATH"
    )
    return found, "" if found else why


def test_the_browser_is_found_by_variable_or_at_the_known_paths(tmp_path, monkeypatch):
    fake = tmp_path / "chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(BROWSER_ENV, str(fake))
    assert find_browser() == (str(fake), "")
    monkeypatch.setenv(BROWSER_ENV, str(tmp_path / "missing"))
    found, why = find_browser()
    assert found is None and "missing" in why and BROWSER_ENV in why
    monkeypatch.delenv(BROWSER_ENV)
    found, why = find_browser()
    assert found == next((b for b in BROWSERS if Path(b).is_file() and os.access(b, os.X_OK)), None)
    assert (found is None) == bool(why)


def test_notebooks_01_and_05_run_in_jupyterlab_in_chromium(tmp_path):
    browser, why = find_browser()
    if browser is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{why}; {REQUIRE_ENV}=1 requires this test")
        pytest.skip(f"browser test: {why}; {REQUIRE_ENV}=1 makes a missing browser a failure")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (never `playwright install`)")
    shutil.rmtree(COPIES, ignore_errors=True)
    COPIES.mkdir(parents=True)
    for name in ("01_reproduce_crash", "05_debug_crash"):  # a parameter cell after the parameters, as papermill does
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in TINY[name].items()))
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(at + 1, cell)
        nbformat.write(nb, COPIES / f"{name}.ipynb")
    scratch = tmp_path / "tmp"  # the server's and kernels' temp dir: the debugger's cell files
    scratch.mkdir()  # (ipykernel_<pid>/, never removed by ipykernel) stay out of the system's /tmp
    env = {**_lab_env(tmp_path / "jupyter"), "WB_BUNDLE_DIR": str(tmp_path / "bundles"), "TMPDIR": str(scratch)}
    server, base, token, log = start_lab(tmp_path, env)
    try:
        _wait_http(f"{base}/api/status?token={token}", server, log)
        with urllib.request.urlopen(f"{base}/?token={token}", timeout=10) as landing:
            assert landing.url.split("?")[0].endswith("/lab/tree/notebooks"), landing.url  # make lab's landing page
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser, args=["--no-sandbox"], headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})

            st = _run_all(page, base, "01_reproduce_crash", token)
            assert st["kernel"] == "python3" and not st["errors"], st
            text = _text(page)
            assert "[crashed]" in text and CRASH in text, "01: crash summary missing"
            run = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .wb-run").first  # RunResult's HTML
            run.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            assert "crashed" in run.text_content() and "traceback (" in run.text_content(), "01: RunResult HTML"
            page.screenshot(path=str(SHOTS / "01-run.png"))
            assert "Traceback (most recent call last)" in text and "spec_info.kv_indptr" in text, (
                "01: traceback missing"
            )
            img = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedImage img").last
            img.scroll_into_view_if_needed()
            page.wait_for_timeout(500)  # let the cells scrolled to paint
            assert img.evaluate("i => i.naturalWidth") > 100, "01: the crash-matrix image did not render"
            page.screenshot(path=str(SHOTS / "01.png"))

            st = _run_all(page, base, "05_debug_crash", token)
            assert not st["errors"], f"05: error output {st['errors']}"
            text = _text(page)
            frame = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output", has_text=">>").last
            frame.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            page.screenshot(path=str(SHOTS / "05-frame.png"))
            assert f"replayed in-process: AttributeError: {CRASH}" in text, "05: replayed exception missing"
            assert ">>" in frame.text_content() and "spec_info.kv_indptr" in frame.text_content(), "05: failing line"
            table = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) table", has_text="kv_indices").last
            table.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            assert "reference" in table.text_content() and "True" in table.text_content(), "05: metadata table"
            assert "metadata equal to the reference" in text
            page.screenshot(path=str(SHOTS / "05.png"))
            record = json.loads((COPIES / "runs" / "notebooks" / "05_debug_crash.json").read_text())
            assert record["runs"]["replay"]["status"] == "ok", record["runs"]["replay"]["problems"]

            stopped, marked = _debugger_recipe(page, frame.text_content())
            assert stopped.startswith("init_forward_metadata") and stopped.endswith(marked), (stopped, marked)
            page.locator(".lm-TabBar-tab", has_text="05_debug_crash.ipynb").first.click()
            end = time.monotonic() + 60
            while not page.evaluate(STATE_JS).get("errors"):  # continued: the read raises, in the new cell
                assert time.monotonic() < end, "05: the replay did not finish after the breakpoint"
                time.sleep(0.5)
            assert page.evaluate(STATE_JS)["errors"] == [f"AttributeError: {CRASH}"]
            browser.close()
    finally:
        left = _stop(server)
        shutil.rmtree(COPIES, ignore_errors=True)
    assert left == [], f"processes left behind: {left}"
    assert list(scratch.glob("ipykernel_*")), "the debugger's cell files did not go to the test's temp dir"
    for shot in ("01.png", "05.png", "05-debugger.png"):
        assert (SHOTS / shot).stat().st_size > 10_000, shot
