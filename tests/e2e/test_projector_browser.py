"""Projector mode at 1280x800 with 150 % browser zoom, every page, both languages.

150 % zoom is emulated the way the browser does it: the page lays out in a 853x533 CSS-pixel
viewport and paints at device_scale_factor 1.5 (a 1280x800 screenshot). Playwright's
device_scale_factor alone would only sharpen the pixels without changing the layout.
Every shot lands in out/screenshots/projector-<page>-<lang>-1280x800@150%.png.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.e2e.conftest import Page

PAGES = [
    "playground",
    "pretrained",
    "step_by_step",
    "why_scale",
    "masks",
    "multihead",
    "sharing",
    "positions",
]

# Text cut off by the browser: an element whose content is wider than its box while it hides the
# overflow (labels ending in "…", a select showing "sinu"), or an input narrower than its value.
CLIPPED = """() => {
  const out = [];
  const roots = document.querySelectorAll('[data-testid=stMain], [data-testid=stSidebar]');
  for (const root of roots) {
    for (const el of root.querySelectorAll('label, p, span, div, button, input')) {
      if (!el.offsetParent) continue;
      const style = getComputedStyle(el);
      const hides = style.overflowX === 'hidden' || style.overflow === 'hidden' ||
        style.textOverflow === 'ellipsis';
      const text = el.tagName === 'INPUT' ? el.value : el.innerText;
      if (!text || !text.trim()) continue;
      if (el.closest('[data-testid=stPlotlyChart], [data-testid=stDataFrame], .katex')) continue;
      if (el.tagName !== 'INPUT' && el.children.length > 0 && !style.textOverflow.includes('ell'))
        continue;
      if ((hides || el.tagName === 'INPUT') && el.scrollWidth > el.clientWidth + 2)
        out.push(text.trim().slice(0, 40) + ' [' + el.scrollWidth + '>' + el.clientWidth + ']');
    }
  }
  const main = document.querySelector('[data-testid=stMain] [data-testid=stMainBlockContainer]')
    || document.querySelector('[data-testid=stMain]');
  const edge = main.getBoundingClientRect().right;
  const boxes = '[data-testid=stDataFrame], [data-testid=stPlotlyChart], [data-testid=stMetric]';
  for (const el of document.querySelectorAll(boxes)) {
    if (el.offsetParent && el.getBoundingClientRect().right > edge + 2)
      out.push(el.dataset.testid + ' past the page edge');
  }
  for (const el of document.querySelectorAll('.katex-display')) {
    if (el.offsetParent && el.scrollWidth > el.clientWidth + 2)
      out.push('formula [' + el.scrollWidth + '>' + el.clientWidth + ']');
  }
  return out;
}"""


class ZoomedPage(Page):
    """1280x800 at 150 % zoom: a 853x533 CSS viewport painted at 1.5 device pixels per pixel."""

    def __init__(self, browser, url: str) -> None:
        self.url = url
        self.page = browser.new_page(
            viewport={"width": 853, "height": 533}, device_scale_factor=1.5
        )
        self.size = "1280x800@150%"


@pytest.fixture
def zoomed(browser, server):
    p = ZoomedPage(browser, server)
    yield p
    p.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", PAGES)
def test_projector_mode_clips_nothing(zoomed, name: str, lang: str) -> None:
    language = "English" if lang == "en" else "中文"
    path = "" if name == "playground" else name  # the default page lives at /
    zoomed.open(f"{path}?projector=true&lang={language}")
    assert zoomed.page.get_by_text("Page not found").count() == 0
    zoomed.wait_count('[data-testid="stPlotlyChart"]', 1, timeout=60, at_least=True)
    # The style element is part of the page's run: a rerun (a URL sync) can replace it a moment.
    size = "() => getComputedStyle(document.documentElement).fontSize"
    with contextlib.suppress(Exception):  # the assertion below says what was found
        zoomed.page.wait_for_function(f"({size})() === '20px'", timeout=15_000)
    root = zoomed.page.evaluate(size)
    assert root == "20px", "projector mode's CSS did not apply"
    zoomed.shot(f"projector-{name}-{lang}")
    clipped = zoomed.page.evaluate(CLIPPED)
    assert not clipped, f"{name} ({lang}) clips: {clipped}"
