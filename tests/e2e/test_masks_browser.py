"""The Masks page and the lesson path's links in a real browser, both languages."""

from __future__ import annotations

import pytest

HEATMAPS = '[data-testid="stPlotlyChart"] .heatmaplayer'


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_masks_page_draws_every_part(page, lang: str) -> None:
    p = page
    p.open(f"masks?lang={lang}")
    for _ in p.sizes():  # one run of the page, checked and shot at both window sizes
        assert p.wait_count(HEATMAPS, 8, timeout=60) == 8
        assert p.page.get_by_text("1e-10").count() >= 1
        p.shot("masks-" + ("en" if lang == "English" else "zh"))


def test_lesson_links_walk_the_classroom_pages(page) -> None:
    page.open("step_by_step")
    seen = ["step_by_step"]
    for _ in range(6):
        page.page.get_by_role("link", name="Next:").or_(
            page.page.locator('[data-testid="stPageLink"] a', has_text="Next:")
        ).first.click()
        page.settle()
        seen.append(page.page.url.split("/")[-1].split("?")[0])
    assert seen == [
        "step_by_step", "why_scale", "masks", "multihead", "sharing", "positions", "pretrained",
    ]  # fmt: skip
    page.shot("lesson-end")
