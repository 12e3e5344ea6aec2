"""The overview as a PNG in a real browser: drawn, and kept when only the head changes."""

from __future__ import annotations

import pytest

IMAGE = '[data-testid="stPlotlyChart"] .imagelayer image'


@pytest.mark.parametrize("size", ["page", "big_page"])
def test_bert_overview_png_is_drawn_and_kept_on_head_change(size: str, request) -> None:
    p = request.getfixturevalue(size)
    p.open("bert")
    assert p.wait_count(IMAGE, 1, 60) == 1
    href = p.page.locator(IMAGE).first.get_attribute("href")
    assert href.startswith("data:image/png;base64,") and len(href) < 200_000
    box = p.page.locator(IMAGE).first.bounding_box()
    assert box["width"] > 300 and box["height"] > 100  # scaled to the chart, not a dot
    head = p.page.locator('input[type="range"][aria-label="Head"]')
    head.focus()
    head.press("ArrowRight")
    p.settle()
    assert "head=1" in p.page.url
    assert p.page.locator(IMAGE).first.get_attribute("href") == href
    p.shot("bert-overview-png")
