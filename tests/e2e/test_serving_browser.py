"""The overview as a PNG in a real browser: drawn, and kept when only the head changes."""

from __future__ import annotations

IMAGE = '[data-testid="stPlotlyChart"] .imagelayer image'


def test_bert_overview_png_is_drawn_and_kept_on_head_change(page) -> None:
    p = page
    p.open("pretrained")
    for n, _ in enumerate(p.sizes(), start=1):  # at each window size, one more head to the right
        assert p.wait_count(IMAGE, 1, 60) == 1
        href = p.page.locator(IMAGE).first.get_attribute("href")
        assert href.startswith("data:image/png;base64,") and len(href) < 200_000
        box = p.page.locator(IMAGE).first.bounding_box()
        assert box["width"] > 300 and box["height"] > 100  # scaled to the chart, not a dot
        head = p.page.locator('input[type="range"][aria-label="Head"]')
        head.focus()
        head.press("ArrowRight")
        p.settle()
        assert f"head={n}" in p.page.url
        assert p.page.locator(IMAGE).first.get_attribute("href") == href
        p.shot("bert-overview-png")


def test_the_first_visitor_of_make_run_gets_a_warm_page(browser) -> None:
    """`python -m attnviz.ui.launch` (what `make run` starts) opens only once it is warm: the first
    visitor, arriving the moment the server answers, never sees the loading message, and gets the
    overview at once. Timings are printed, not asserted (bench/load.py --cold-browser has them)."""
    import os
    import subprocess
    import sys
    import time

    from tests.apphelpers import ROOT
    from tests.e2e.conftest import _free_port, wait_healthy

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "ATTNVIZ_PRIME"}
    with open(ROOT / "out" / "e2e-serve-cold.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnviz.ui.launch", "attnviz/app.py",
             "--server.port", str(port),
             "--server.headless", "true", "--server.fileWatcherType", "none",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        assert wait_healthy(url, 300, poll=0.1), "python -m attnviz.ui.launch never answered"
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        t0 = time.perf_counter()
        page.goto(f"{url}/pretrained", wait_until="commit")
        loading_seen = False
        while page.locator(IMAGE).count() == 0 and time.perf_counter() - t0 < 120:
            loading_seen |= page.get_by_text("Loading the model in the background").count() > 0
            time.sleep(0.05)
        print(f"first visitor: overview image after {time.perf_counter() - t0:.2f} s")
        assert page.locator(IMAGE).count() == 1, "the overview never drew"
        assert not loading_seen, "the first visitor waited for the model"
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "attnviz: warm in" in (ROOT / "out" / "e2e-serve-cold.log").read_text()
