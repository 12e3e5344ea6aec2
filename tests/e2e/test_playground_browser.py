"""The Playground in a real browser: it renders, and the heads slider and scaling toggle work."""

from __future__ import annotations

PLOTS = '[data-testid="stPlotlyChart"] .heatmaplayer'


def test_playground_renders_one_chart_per_head(page) -> None:
    page.open()
    assert page.wait_count(PLOTS, 4) == 4
    assert page.wait_count(PLOTS + " image", 4) == 4  # drawn, not just placed
    page.shot("playground")


def test_heads_slider_changes_the_number_of_heatmaps(page) -> None:
    page.open()
    thumb = page.page.locator('input[type="range"][aria-label="Heads h"]')
    thumb.focus()
    thumb.press("ArrowRight")  # 4 -> 8 heads
    page.settle()
    assert page.wait_count(PLOTS, 8) == 8
    assert "heads=8" in page.page.url  # the view is shareable: the control is in the URL
    page.shot("playground-8-heads")


def test_scaling_toggle_and_url_state(page) -> None:
    page.open("?scale=false&heads=2")
    assert page.wait_count(PLOTS, 2) == 2
    toggle = page.page.get_by_text("÷ √d_k")
    assert toggle.count() >= 1
    toggle.first.click()
    page.settle()
    assert "scale" not in page.page.url  # back to the default (scaled): dropped from the URL


def test_playground_projector_size(big_page) -> None:
    big_page.open("?lang=中文")
    assert big_page.wait_count(PLOTS, 4) == 4
    assert big_page.page.get_by_role("heading", name="实验场").count() == 1
    big_page.shot("playground-zh")
