"""A 4,096-token document pasted while Link two tokens is open on a link whose positions are past
the sentence, then a query picked by typing: the key picker's kept choice came back as text and
raised TypeError (fails without the fix in ui/explorer/link.py). Then Head detail's 512 window:
the weights as numbers, scores and logits as pictures, in a real browser."""

from __future__ import annotations

import pytest

from tests.e2e.test_long_document_browser import _paste_4096, _wait_text, llama  # noqa: F401

pytestmark = pytest.mark.e2e


def test_link_then_head_detail_at_4096_tokens(page, llama) -> None:  # noqa: F811
    page.open(f"pretrained?model={llama}&view=link&query=2000&link_key=1990")  # past the sentence
    _wait_text(page, "tokens traced")
    page.wait_count('[data-testid="stPlotlyChart"]', 1, timeout=60, at_least=True)
    _paste_4096(page)
    page.assert_no_error()
    box = page.page.locator('[data-testid="stSelectbox"]').filter(has_text="Query token").first
    box.locator("input").click()
    page.page.keyboard.type("2000:")
    page.page.keyboard.press("Enter")
    page.settle(120)
    page.assert_no_error()
    _wait_text(page, "in every head")  # the link grid of the long input
    page.page.get_by_role("button", name="Head detail").click()
    page.settle(120)
    _wait_text(page, "colour only past 256 a side")
    images = page.page.locator('[data-testid="stPlotlyChart"] .layer-above image, '
                               '[data-testid="stPlotlyChart"] image')  # fmt: skip
    assert images.count() >= 2  # scores and logits drawn as pictures
    page.assert_no_error()
    page.shot("long-4096-link-then-detail")
