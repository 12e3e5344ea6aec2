"""A registry LLM chosen in the Pretrained page's model picker in a real browser:
SmolLM2-135M loads from its converted cache and its trace is drawn; shot at both sizes."""

from __future__ import annotations

import pytest

from attnviz.engine.bundled import registry_file

CHART = '[data-testid="stPlotlyChart"]'


def test_smollm2_picked_in_the_pretrained_picker_draws_its_trace(page) -> None:
    if registry_file("smollm2-135m") is None:
        pytest.skip("SmolLM2 is not installed here (`make llms` installs it)")
    page.open("pretrained")
    page.wait_count(CHART, 1, timeout=180, at_least=True)  # the bundled encoder's trace first
    box = page.page.locator('[data-testid="stSelectbox"]').filter(has_text="Model").first
    box.locator("input").click()
    page.page.keyboard.type("smollm2")
    page.page.keyboard.press("Enter")
    page.settle(180)
    page.wait_count(CHART, 1, timeout=180, at_least=True)
    page.settle(180)
    page.assert_no_error()
    for _ in page.sizes():
        body = page.page.inner_text("body")
        assert "30 layers × 9 heads · 3 K/V heads (GQA)" in body, body[:2000]
        assert "Apache-2.0" in body  # its licence beside the picker
        assert page.count(CHART) >= 1  # SmolLM2's trace drawn
        page.shot("pretrained-smollm2-picked")
