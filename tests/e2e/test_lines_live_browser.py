"""The app's lines view drawn by attnviz's own JavaScript (Streamlit Components v2, the module
the notebook widget runs): hovering a token isolates its lines without a rerun, a click keeps it,
tokens are text. Screenshots before and after: out/screenshots/lines-live-*.png."""

from __future__ import annotations

import time

LINES = ".attnviz svg[data-role=lines]"


def _count(p) -> int:
    return int(p.page.locator(LINES).get_attribute("data-lines"))


def _check(p) -> None:
    p.open("pretrained?view=lines&layer=4&lines_heads=5")
    p.page.locator(LINES).wait_for(timeout=60_000)
    live = p.page.locator(".attnviz").first
    live.scroll_into_view_if_needed()
    before = _count(p)
    assert before > 0
    tokens = p.page.locator(".attnviz text[data-token^=q]")
    assert tokens.first.text_content() == "[CLS]"
    state = p.page.locator('[data-testid="stApp"]')
    shot = p.shot("lines-live-before")
    it = p.page.locator(".attnviz text[data-token=q10]")
    assert it.text_content() == "it"
    it.hover()
    hovered = _count(p)
    assert 0 < hovered < before
    assert state.get_attribute("data-test-script-state") == "notRunning"  # no rerun for a hover
    it.click()
    p.page.mouse.move(1, 1)
    time.sleep(0.3)
    assert _count(p) == hovered and p.page.locator(LINES).get_attribute("data-focus") == "q10"
    assert state.get_attribute("data-test-script-state") == "notRunning"
    shot = p.shot("lines-live-after-click")
    assert shot.exists()
    p.assert_no_error()


def test_hover_isolates_a_token_in_the_apps_lines_view(page) -> None:
    _check(page)


def test_hover_isolates_a_token_at_1920(big_page) -> None:
    _check(big_page)
