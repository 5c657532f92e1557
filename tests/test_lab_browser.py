"""JupyterLab in a real browser: notebooks 01 and 05 run from the UI in headless Chromium.

Starts JupyterLab on 127.0.0.1 (a free port, a token, its own runtime/config/data dirs and a
kernelspec pointing at this Python), opens copies of the notebooks (the repository's stay clean;
``max_new_tokens`` 8 injected after the parameters cell, as papermill does), runs all cells
through the app's command registry, waits for the kernel to go idle and checks the rendered page.
Screenshots go to ``artifacts/lab/``. The server and every process it started are
stopped at the end. Needs Debian's ``chromium`` (``.ci/run`` installs it) and Playwright for Python
(dev extra); it never downloads a browser.
"""

from __future__ import annotations

import json
import os
import secrets
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

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "artifacts" / "lab"
CRASH = "'EagleDraftExtendInput' object has no attribute 'kv_indptr'"
RUN_TIMEOUT_S = 150
TINY = {"max_new_tokens": 8}  # the box is small: shorter generations, the same crash and pages

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


def _run_all(page, base: str, name: str, token: str) -> dict:
    """Open ``name`` alone (its own workspace), run all cells from the UI, wait for the kernel to go idle."""
    t0 = time.monotonic()
    page.goto(f"{base}/lab/workspaces/{name}/tree/notebooks/{name}.ipynb?reset&token={token}")
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


def test_notebooks_01_and_05_run_in_jupyterlab_in_chromium(tmp_path):
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`; .ci/run does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (never `playwright install`)")
    work = tmp_path / "root"
    (work / "notebooks").mkdir(parents=True)
    for name in (
        "01_reproduce_crash",
        "05_debug_crash",
    ):  # a parameter cell after the parameters, as papermill injects it
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in TINY.items()))
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(at + 1, cell)
        nbformat.write(nb, work / "notebooks" / f"{name}.ipynb")
    env = _lab_env(tmp_path / "jupyter")
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
                f"--ServerApp.root_dir={work}",
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
            cwd=work,
        )
    base = f"http://127.0.0.1:{port}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        _wait_http(f"{base}/api/status?token={token}", server, log)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
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
            record = json.loads((work / "notebooks" / "runs" / "notebooks" / "05_debug_crash.json").read_text())
            assert record["runs"]["replay"]["status"] == "ok", record["runs"]["replay"]["problems"]
            browser.close()
    finally:
        left = _stop(server)
    assert left == [], f"processes left behind: {left}"
    assert (SHOTS / "01.png").stat().st_size > 10_000 and (SHOTS / "05.png").stat().st_size > 10_000
