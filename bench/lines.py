"""The lines view against head detail at n = 512 on the Pretrained page, in one real browser run.

Run: .venv/bin/python bench/lines.py   (needs Debian's chromium; prints times and the ratio)
One `streamlit run` server and one headless Chromium (Playwright). For each view the page is
opened by URL (same text, layer 0, head 0, so the trace is cached after the warm-up) and timed
from navigation to drawn: head detail when its three heatmaps have their images, the lines view
when its WebGL canvas, both token columns and its caption are there; then two animation frames.
Views alternate, REPS times each; the ratio of medians is lines / head detail (target: <= 2).
A second table times a switch on the open page (click the view's button -> drawn): the server's
rerun plus the browser's drawing, without the page load both views share.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import CHROME_ARGS, CHROMIUM, _free_port  # noqa: E402

REPS = 5
N = 512
SENTENCE = "the cat sat on a mat and then it ran to see one big red dog in my old house"

DRAWN = {
    "detail": "() => document.querySelectorAll("
    "'[data-testid=stPlotlyChart] .heatmaplayer image').length >= 3",
    "lines": "() => !!document.querySelector("
    "'[data-testid=stPlotlyChart] canvas.gl-canvas-context') && document.querySelectorAll("
    "'[data-testid=stPlotlyChart] .scatterlayer .trace').length >= 2"
    " && document.body.innerText.includes('Lines drawn:')",
}
FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))"


def text_of(n_tokens: int) -> str:
    # every word of SENTENCE is one wordpiece of the bundled vocabulary; [CLS] and [SEP] make 2
    words = (SENTENCE.split() * (n_tokens // 10 + 1))[: n_tokens - 2]
    return " ".join(words)


def timed_open(page, base: str, view: str, text: str) -> float:
    query = urllib.parse.urlencode({"view": view, "text": text, "layer": 0, "head": 0})
    t0 = time.perf_counter()
    page.goto(f"{base}/pretrained?{query}")
    page.wait_for_function(DRAWN[view], timeout=120_000, polling=20)
    page.evaluate(FRAMES)
    return time.perf_counter() - t0


LABELS = {"detail": "Head detail", "lines": "Lines"}


def timed_switch(page, view: str) -> float:
    button = page.locator("[data-testid=stButtonGroup] button", has_text=LABELS[view]).first
    t0 = time.perf_counter()
    button.click()
    page.wait_for_function(DRAWN[view], timeout=120_000, polling=20)
    page.evaluate(FRAMES)
    return time.perf_counter() - t0


def main() -> None:
    from playwright.sync_api import sync_playwright

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "attnviz" / "app.py"),
         "--server.headless", "true", "--server.port", str(port),
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(180):
            try:
                if urllib.request.urlopen(f"{base}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.5)
        text = text_of(N)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
            page = browser.new_page(viewport={"width": 1920, "height": 1080})
            for view in DRAWN:  # warm-up: model load, trace cache, plotly bundle
                timed_open(page, base, view, text)
            n_lines = page.evaluate(
                "() => document.body.innerText.split('Lines drawn:')[1].trim().split(' ')[0]"
            )
            times: dict[str, list[float]] = {view: [] for view in DRAWN}
            switches: dict[str, list[float]] = {view: [] for view in DRAWN}
            for _ in range(REPS):
                for view in DRAWN:
                    times[view].append(timed_open(page, base, view, text))
            for _ in range(REPS):
                for view in ("lines", "detail"):  # the page is on head detail after the loop
                    switches[view].append(timed_switch(page, view))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"n = {N} tokens, Pretrained page at 1920x1080, layer 0 head 0, lines drawn: {n_lines}")
    for name, table in (("open by URL", times), ("switch on the page", switches)):
        print(f"{name}:\n  {'view':<8} {'median s':>9} {'min s':>7} {'max s':>7}")
        for view, ts in table.items():
            print(f"  {view:<8} {statistics.median(ts):>9.3f} {min(ts):>7.3f} {max(ts):>7.3f}")
        ratio = statistics.median(table["lines"]) / statistics.median(table["detail"])
        print(f"  lines / head detail = {ratio:.2f}  (target <= 2)")


if __name__ == "__main__":
    main()
