"""A real Streamlit server and Debian's Chromium, driven by Playwright (no browser download)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = ROOT / "out" / "screenshots"
# The text that holds an atlas measurement until its Stop click (attnviz.ui.atlas.HOLD_ENV).
HOLD_ATLAS = "hold-until-stop"
# A whole-page screenshot grows the viewport to the page's height, so every chart is laid out again
# at that size and back: 3 s of a 16 s browser test (test_pages_browser.py -k "lesson_pages and
# multihead": 32.6 s -> 26.4 s), on 2 cores where the browser tests are CPU-bound. `make test`
# shoots what the window shows; ATTNVIZ_TEST_SHOTS=full (`make shots`, the default) the whole page.
FULL_SHOTS = os.environ.get("ATTNVIZ_TEST_SHOTS", "full") == "full"
CHROME_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout: float, poll: float = 0.5, proc=None) -> bool:
    """Poll a Streamlit server's /_stcore/health until it answers "ok" (True) or `timeout` ends
    (False), or, given its process, until that process has exited (False)."""
    deadline = time.time() + timeout
    while time.time() < deadline and (proc is None or proc.poll() is None):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return True
        except OSError:
            time.sleep(poll)
    return False


@contextlib.contextmanager
def app_process(command: list, log: Path, cwd: Path, env: dict | None = None, timeout=90):
    """Start an app command (`attnviz`, `streamlit run ...`) on a free port of 127.0.0.1, in a
    process group of its own, and wait until /_stcore/health answers; yields (url, port), then
    stops the whole group. Fails with the end of its log if it never answers."""
    port = _free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*command, "--server.headless", "true", "--server.port", str(port),
             "--server.address", "127.0.0.1"],
            cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_healthy(url, timeout, poll=0.2, proc=proc):
            pytest.fail(
                f"{command[0]} did not answer /_stcore/health within {timeout} s (exit "
                f"{proc.poll()}): {Path(log).read_text()[-3000:]}"
            )
        yield url, port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def server() -> str:
    if not Path(CHROMIUM).exists():
        reason = f"Debian's chromium is not installed at {CHROMIUM} (`make test` installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    port = _free_port()
    (ROOT / "out").mkdir(exist_ok=True)
    with open(ROOT / "out" / "e2e-server.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(ROOT / "attnviz" / "app.py"),
                "--server.headless",
                "true",
                "--server.port",
                str(port),
                "--server.fileWatcherType",
                "none",
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            # An atlas measurement with this text among its texts waits for its Stop click.
            env={**os.environ, "ATTNVIZ_TEST_HOLD_ATLAS": HOLD_ATLAS},
        )
        url = f"http://127.0.0.1:{port}"
        if not wait_healthy(url, 90):
            proc.kill()
            pytest.fail("the Streamlit server did not answer /_stcore/health within 90 s")
        yield url
        proc.terminate()
        proc.wait(timeout=20)


# The two window sizes every browser test checks and shoots: a laptop and a 1080p projector.
SIZES = ((1280, 800), (1920, 1080))

# Every chart's laid-out box and its plot's size: stable once plotly has drawn at the new width.
_LAYOUT = """() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].map(c => {
  const r = c.getBoundingClientRect(), s = c.querySelector('.main-svg');
  return [r.width, r.height, s ? s.getAttribute('width') : null];
}).concat([[document.documentElement.clientWidth, document.documentElement.clientHeight]])"""


class Page:
    """One browser tab on the app, with waits that know Streamlit."""

    def __init__(self, browser, url: str, width: int = 1280, height: int = 800, **options) -> None:
        self.url = url  # options: the tab's own, e.g. locale="zh-CN" (Browser.new_page)
        self.page = browser.new_page(viewport={"width": width, "height": height}, **options)
        self.size = f"{width}x{height}"

    def open(self, path: str = "") -> Page:
        self.page.goto(f"{self.url}/{path}")
        return self.settle()

    def settle(self, timeout: float = 90) -> Page:
        # Streamlit marks the app "running" while a script runs; wait until it is done, twice in a
        # row, so a rerun that starts right after one ends is waited for too.
        app = self.page.locator('[data-testid="stApp"]')
        app.wait_for(timeout=timeout * 1000)
        deadline = time.time() + timeout
        calm = 0
        while time.time() < deadline and calm < 3:
            state = app.get_attribute("data-test-script-state")
            calm = calm + 1 if state == "notRunning" else 0
            time.sleep(0.3)
        assert calm >= 3, "the app kept running past the timeout"
        self.assert_no_error()
        return self

    def assert_no_error(self) -> None:
        errors = self.page.locator('[data-testid="stException"]')
        assert errors.count() == 0, errors.first.inner_text()

    def count(self, selector: str) -> int:
        return self.page.locator(selector).count()

    def wait_count(self, selector: str, n: int, timeout: float = 30, at_least: bool = False) -> int:
        """Poll until `selector` matches n elements (charts draw after the script ends)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.count(selector)
            if found == n or (at_least and found >= n):
                break
            time.sleep(0.25)
        return found

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}-{self.size}.png"
        if not FULL_SHOTS:  # what the window shows: no relayout of every chart twice
            self.page.screenshot(path=str(path))
            return path
        # Streamlit scrolls inside its main container, so a "full page" shot would stop at the
        # viewport: grow the viewport to the content's height, shoot, and restore it.
        size = self.page.viewport_size
        tall = self.page.evaluate(
            "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain], "
            "[data-testid=stAppViewContainer]')].map(e => e.scrollHeight), window.innerHeight)"
        )
        self.page.set_viewport_size({"width": size["width"], "height": min(int(tall), 6000)})
        time.sleep(0.8)
        self.page.screenshot(path=str(path))
        self.page.set_viewport_size(size)
        return path

    def resize(self, width: int, height: int) -> Page:
        """Set the window to width x height and wait until the page has laid itself out again.
        A resize reruns no script (the server does not know the window's size): the browser
        lays the same run out again, and plotly redraws each chart at its new width."""
        self.size = f"{width}x{height}"
        if self.page.viewport_size == {"width": width, "height": height}:
            return self  # already laid out at this size
        self.page.set_viewport_size({"width": width, "height": height})
        self.relayout()
        self.assert_no_error()
        return self

    def relayout(self, timeout: float = 15) -> None:
        """Wait until every chart's box and drawn size, and the script's state (not running),
        have stayed the same for three looks in a row."""
        app = self.page.locator('[data-testid="stApp"]')
        deadline = time.time() + timeout
        last, calm = None, 0
        while time.time() < deadline and calm < 3:
            now = [self.page.evaluate(_LAYOUT), app.get_attribute("data-test-script-state")]
            calm = calm + 1 if now == last and now[1] == "notRunning" else 0
            last = now
            time.sleep(0.2)
        assert calm >= 3, f"the page kept changing after a resize to {self.size}"

    def sizes(self, sizes=SIZES):
        """Yield at each of `sizes` (1280x800, then 1920x1080): the page's work (load, type,
        wait for charts) is done once, then every check and shot runs at each size."""
        for width, height in sizes:
            yield self.resize(width, height)

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def page(browser, server):
    p = Page(browser, server)
    yield p
    p.close()


@pytest.fixture
def big_page(browser, server):
    p = Page(browser, server, 1920, 1080)
    yield p
    p.close()
