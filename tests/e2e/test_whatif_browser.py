"""The what-if panel in a real browser (defect 6): it must not push the views down the page."""

from __future__ import annotations

VIEW_PICKER = '[data-testid="stButtonGroup"]'


def _views_top(page) -> float:
    page.wait_count(VIEW_PICKER, 1, timeout=60, at_least=True)
    return page.page.locator(VIEW_PICKER).first.bounding_box()["y"]


def test_whatif_panel_keeps_the_views_near_the_top(page) -> None:
    page.open("pretrained")
    plain = _views_top(page)
    page.open("pretrained?wi_silence=L5H11&layer=5&head=11&view=detail")
    with_panel = _views_top(page)
    # the old panel (knobs open, grid and diff always shown) put them ~900 px further down
    assert with_panel - plain < 420, (plain, with_panel)
    page.shot("bert-what-if-compact")
    page.page.get_by_text("What changed, in detail").first.click()
    page.settle()
    page.page.get_by_role("tab", name="Each token's output").click()
    page.wait_count('[data-testid="stPlotlyChart"]', 5, timeout=60, at_least=True)
    page.shot("bert-what-if-details")
