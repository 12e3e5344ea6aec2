"""The Chinese UI in a real browser at a desktop and a laptop size, with screenshots to look at."""

from __future__ import annotations

import re

import pytest

ZH = "lang=%E4%B8%AD%E6%96%87"
# url path -> extra query: each page in a state that shows its tables and panels.
PAGES = {
    "": "view=query",
    "pretrained": "wi_scale=false&view=stats",
    "step_by_step": "",
    "why_scale": "",
    "multihead": "",
    "positions": "po_b=%E7%8C%AB%E5%92%AC%E4%BA%BA",
    "sharing": "",
}
ENGLISH_DEFAULTS = re.compile(r"Choose options|Choose an option|No results|\bNone\b")


@pytest.mark.parametrize("path", list(PAGES))
def test_chinese_page(path: str, page) -> None:
    p = page
    query = "&".join(q for q in (ZH, PAGES[path]) if q)
    p.open(f"{path}?{query}")
    p.wait_count('[data-testid="stPlotlyChart"]', 1, timeout=90, at_least=True)
    for _ in p.sizes():  # one run of the page, checked and shot at both window sizes
        text = p.page.locator('[data-testid="stApp"]').inner_text()
        assert not ENGLISH_DEFAULTS.search(text), ENGLISH_DEFAULTS.search(text).group()
        labels = p.page.locator('[data-testid="stMetricLabel"]')
        for i in range(labels.count()):  # a metric label cut with "…" hides what the number is
            cut = labels.nth(i).evaluate(
                "e => [e, ...e.querySelectorAll('*')].some(x => x.scrollWidth > x.clientWidth + 1)"
            )
            assert not cut, f"{labels.nth(i).inner_text()} at {p.size}"
        p.shot(f"zh-{path or 'playground'}")
