"""The explorer views in a real browser, at a laptop and a projector size."""

from __future__ import annotations

import pytest

HEATMAPS = '[data-testid="stPlotlyChart"] .heatmaplayer'


def test_overview_pick_a_head_and_drill_in(page) -> None:
    page.open("?view=overview")
    assert page.wait_count(HEATMAPS, 3) == 3  # the chosen head's scores, logits, weights
    before = page.page.locator('[data-testid="stPlotlyChart"]').nth(1).inner_html()
    head = page.page.locator('input[type="range"][aria-label="Head"]')
    head.focus()
    head.press("ArrowRight")
    page.settle()
    assert "head=1" in page.page.url
    after = page.page.locator('[data-testid="stPlotlyChart"]').nth(1).inner_html()
    assert before != after  # the drill-in redrew for the new head
    page.shot("overview")


@pytest.mark.parametrize(
    "view", ["heads", "overview", "detail", "query", "link", "outputs", "stats"]
)
def test_every_view_at_two_sizes(view: str, page) -> None:
    p = page
    p.open(f"?view={view}&head=1&query=7&causal=true")
    expected = {"heads": 4, "overview": 3, "detail": 3, "query": 2, "link": 1, "outputs": 2}
    for _ in p.sizes():  # one run of the page, checked and shot at both window sizes
        if view == "stats":
            assert p.wait_count('[data-testid="stDataFrame"]', 1) == 1
        else:
            assert p.wait_count(HEATMAPS, expected[view]) == expected[view]
        p.shot(f"view-{view}")


def test_clicking_a_thumbnail_opens_that_head(page) -> None:
    page.open("pretrained")  # overview of 6 layers x 12 heads
    points = page.page.locator('[data-testid="stPlotlyChart"] .scatterlayer .point')
    assert page.wait_count('[data-testid="stPlotlyChart"] .scatterlayer .point', 72, 60) == 72
    points.nth(2 * 12 + 5).click(force=True)  # layer 2, head 5
    page.settle()
    assert "layer=2" in page.page.url and "head=5" in page.page.url
    page.shot("overview-click")
