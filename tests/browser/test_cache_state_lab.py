"""JupyterLab end to end: open notebooks/04_cache_state.py in headless chromium as a notebook (the default viewer
`make setup` installs from jupyter-config/), run it on a dry run recorded with --record-cache-state, move the step
slider, read the status.

The server and the browser are started here and stopped in `finally`; every wait is bounded, so the test stops by
itself (about 30-60 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from toolkit.notebooks_runner import notebooks_dir
from toolkit.viz.recorder import record_synthetic_run
from toolkit.viz.state_model import CacheStateModel

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
SERVER_START_S = 45
PROMPT_DONE = re.compile(r"\[\d+\]")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REPO = Path(__file__).resolve().parents[2]
LAB_SETTINGS = "jupyter-config/overrides.d/hybrid-kv-toolkit.json"  # installed by `make setup`


def _installed_default_viewer() -> None:
    """The default-viewer setting the project ships, where this venv's JupyterLab reads it (`make setup`)."""
    installed = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / Path(LAB_SETTINGS).name
    shipped = json.loads((REPO / LAB_SETTINGS).read_text())
    assert installed.is_file() and json.loads(installed.read_text()) == shipped, f"{installed}: run `make setup`"


def _write_notebook(root: Path, run_dir: Path) -> Path:
    """notebooks/04_cache_state.py, the .py itself, with its parameters pointing at the recorded run."""
    text = (notebooks_dir() / "04_cache_state.py").read_text()
    for line, value in (
        ('run_dir: str = ""', f"run_dir: str = {str(run_dir)!r}"),
        ("start_step: int = -1", "start_step: int = 0"),
    ):
        assert line in text, line
        text = text.replace(line, value, 1)
    target = root / "04_cache_state.py"
    target.write_text(text)
    return target


def _start_lab(root: Path, tmp: Path, port: int, token: str) -> subprocess.Popen:
    settings = tmp / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
    )
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--allow-root",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={root}",
    ]
    log = open(tmp / "jupyterlab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"jupyterlab exited with {proc.returncode}: {(tmp / 'jupyterlab.log').read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"jupyterlab did not answer within {SERVER_START_S} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def _run_code_cells(page, deadline_s: float = 60) -> int:
    """Shift+Enter each code cell, pressing again while its prompt stays empty (a dropped first request)."""
    cells = page.locator(".jp-Notebook .jp-Cell.jp-CodeCell")
    total = cells.count()
    end = time.monotonic() + deadline_s
    for i in range(total):
        prompt = cells.nth(i).locator(".jp-InputArea-prompt")
        for _attempt in range(4):
            prompt.click()
            page.keyboard.press("Shift+Enter")
            pressed = time.monotonic()
            while time.monotonic() < end:
                text = prompt.inner_text().strip()
                if PROMPT_DONE.search(text):
                    break
                if "*" not in text and time.monotonic() - pressed > 4:
                    break  # never queued: press again
                page.wait_for_timeout(150)
            if PROMPT_DONE.search(prompt.inner_text()):
                break
        else:
            raise AssertionError(f"code cell {i} never ran (prompt {prompt.inner_text()!r})")
        if time.monotonic() > end:
            raise AssertionError(f"running the notebook took over {deadline_s} s (stopped at code cell {i})")
    return total


def _status(page) -> str:
    return " ".join(page.locator(".kvtk-status").inner_text().split())


def _expect_status(page, expected: str, timeout_s: float = 10) -> None:
    end = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < end:
        seen = _status(page)
        if seen == expected:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"status shows {seen!r}, the model says {expected!r}")


def test_cache_state_notebook_in_jupyterlab(tmp_path):
    from playwright.sync_api import sync_playwright

    from toolkit.experiments import ExperimentConfig, run_experiment

    _installed_default_viewer()
    chromium = os.environ.get("KVTK_CHROMIUM") or shutil.which("chromium")
    # A dry run (vLLM's scheduler, the toolkit connector) recorded with --record-cache-state.
    config = ExperimentConfig(
        engine="dry", trace="fewshot-small", phases=("cold", "hot"), cpu_gib=0.05, record_cache_state=True
    )
    run_dir = run_experiment(config.replace(out=str(tmp_path / "run"))).run_dir
    recording = run_dir / "cache_state.jsonl"
    model = CacheStateModel.from_run_dir(run_dir)
    raw_steps = [json.loads(line) for line in recording.read_text().splitlines()]
    raw_steps = [r for r in raw_steps if r.get("type") == "step"]
    expected = {k: " ".join(" ".join(model.status_lines(k)).split()) for k in range(model.num_steps)}
    assert expected[0] != expected[3] != expected[6], "the chosen steps must differ for the test to mean anything"

    root = tmp_path / "lab"
    root.mkdir()
    _write_notebook(root, run_dir)
    port, token = _free_port(), secrets.token_hex(16)
    proc = _start_lab(root, tmp_path, port, token)
    shot = tmp_path / "cache_state.png"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS, timeout=30_000)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.set_default_timeout(20_000)
                # The .py opened as a user's click opens it: with its default viewer, the notebook, not the editor.
                page.goto(f"http://127.0.0.1:{port}/lab/tree/04_cache_state.py?reset&token={token}")
                page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(state="visible", timeout=30_000)
                assert page.locator(".jp-FileEditor").count() == 0
                page.get_by_text(re.compile(r"\|\s*Idle")).first.wait_for(timeout=30_000)
                _run_code_cells(page)

                page.locator(".kvtk-status").wait_for(state="visible", timeout=15_000)
                _expect_status(page, expected[0])
                # The pool figure renders inside the widget (jupyterlab-plotly).
                page.locator(".widget-output .js-plotly-plot").first.wait_for(state="visible", timeout=15_000)

                # Move the step slider with the keyboard, one step at a time, as a user would.
                handle = page.locator(".widget-slider .noUi-handle").first
                handle.focus()
                for k in (1, 2, 3):
                    handle.press("ArrowRight")
                    _expect_status(page, expected[k])
                # ... and with the step buttons.
                for k in (4, 5, 6):
                    page.get_by_role("button", name="next ▶").click()
                    _expect_status(page, expected[k])
                # Cross-check step 6 against the recording itself, not only the model that renders it.
                pool = raw_steps[6]["pool"]
                used = sum(g["num_used_blocks"] for g in pool["groups"])
                assert f"pool: used {used}/" in _status(page) and f"free {pool['num_free_blocks']}" in _status(page)
                # The figure redraws after the text: wait for step 6's pool figure before the screenshot.
                page.locator(".widget-output .gtitle", has_text="step 6").first.wait_for(timeout=15_000)
                page.locator(".kvtk-status").scroll_into_view_if_needed()
                page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
    finally:
        _stop(proc)
    assert shot.stat().st_size > 10_000
    if os.environ.get("KVTK_SCREENSHOT_DIR"):
        target = Path(os.environ["KVTK_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / shot.name)


def test_html_report_renders_offline(tmp_path):
    """`kvtk notebooks` HTML: opened from disk with every network request refused, the plotly figures draw, and
    the widget (no saved widget state) shows its static snapshot at the busiest step: its status and three figures."""
    from playwright.sync_api import sync_playwright

    from toolkit.notebooks_runner import run_notebooks

    [result] = run_notebooks(only=["04"], out_dir=tmp_path / "run", smoke=True)
    assert result.error == "" and result.html is not None
    chromium = os.environ.get("KVTK_CHROMIUM") or shutil.which("chromium")
    refused = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS, timeout=30_000)
        try:
            context = browser.new_context()
            context.route(
                lambda url: not url.startswith("file:"),
                lambda route: (refused.append(route.request.url), route.abort()),
            )
            page = context.new_page()
            page.goto(result.html.as_uri(), wait_until="load", timeout=30_000)
            page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=15_000)
            assert page.locator(".plotly-graph-div").count() >= 1
            snapshot = page.locator(".kvtk-snapshot")
            snapshot.locator(".js-plotly-plot .main-svg").nth(2).wait_for(timeout=15_000)
            assert snapshot.locator(".js-plotly-plot").count() == 3
            # The snapshot is the busiest step of the smoke run's synthetic recording (12 steps), not step 0.
            busiest = CacheStateModel(record_synthetic_run(None, num_steps=12)).busiest_step()
            text = snapshot.inner_text()
            assert busiest > 0 and f"at step {busiest} (the busiest step" in text, text[:300]
            assert f"step {busiest} of 11" in text and "null block" in text
        finally:
            browser.close()
    assert refused == []
