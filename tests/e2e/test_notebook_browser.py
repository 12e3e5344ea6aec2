"""docs/notebook_example.ipynb in a real JupyterLab, offline, in headless Chromium: the cells run
on the kernel, the attnviz widget draws (anywidget's extension, the module inlined, nothing
fetched), and hovering or clicking a token isolates its lines. Screenshots before and after the
click go to out/screenshots/notebook-*.png."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.e2e.conftest import ROOT, SHOTS, _free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    where = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "docs" / "notebook_example.ipynb", where / "example.ipynb")
    port = _free_port()
    # "Would you like to get notified about official Jupyter news?" covered the screenshots: the
    # answer "never" goes in this lab's own user settings.
    settings = where / ".lab-settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (
        settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    ).write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               JUPYTER_CONFIG_DIR=str(where / ".jupyter"),
               JUPYTERLAB_SETTINGS_DIR=str(settings))  # fmt: skip
    log = open(where / "lab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={where}",
         "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
         "--LabApp.expose_app_in_browser=True", "--allow-root"],
        cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("JupyterLab did not start: " + (where / "lab.log").read_text()[-2000:])
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    log.close()


def test_the_widget_runs_in_jupyterlab_and_isolates_a_token(lab, browser) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        outside = []
        local = (lab, "data:", "blob:", "ws://127.0.0.1")
        page.on("request", lambda r: r.url.startswith(local) or outside.append(r.url))
        page.goto(f"{lab}/lab/tree/example.ipynb")
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        # the kernel is connected and idle, then Run All through JupyterLab's own command
        kernel = "window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status"
        page.wait_for_function(f"() => {kernel} === 'idle'", timeout=120_000)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        lines = page.locator(".attnviz svg[data-role=lines]")
        try:
            lines.wait_for(timeout=300_000)
        except Exception:
            page.screenshot(path=str(SHOTS / "notebook-failed-1280x800.png"))
            raise
        widget = page.locator(".attnviz").first
        widget.scroll_into_view_if_needed()
        before = int(lines.get_attribute("data-lines"))
        assert before > 0
        widget.screenshot(path=str(SHOTS / "notebook-widget-before-1280x800.png"))
        query = page.locator(".attnviz text[data-token=q10]")  # "it"
        assert query.text_content() == "it"
        query.hover()
        hovered = int(lines.get_attribute("data-lines"))
        query.click()
        page.mouse.move(1, 1)
        clicked = int(lines.get_attribute("data-lines"))
        assert 0 < hovered < before and clicked == hovered
        assert lines.get_attribute("data-focus") == "q10"
        widget.screenshot(path=str(SHOTS / "notebook-widget-after-click-1280x800.png"))
        page.set_viewport_size({"width": 1920, "height": 1080})
        time.sleep(0.5)
        widget.screenshot(path=str(SHOTS / "notebook-widget-after-click-1920x1080.png"))
        page.screenshot(path=str(SHOTS / "notebook-1920x1080.png"))
        assert page.get_by_text("official Jupyter news").count() == 0  # no news prompt over it
        # the static fallback of every view is there too, and the Plotly figures drew
        assert page.locator(".js-plotly-plot").count() >= 4
        assert not [u for u in outside if not u.startswith("http://127.0.0.1")], outside
    finally:
        page.close()
