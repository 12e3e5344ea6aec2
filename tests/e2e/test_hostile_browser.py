"""Hostile input in a real browser: what Chromium renders, not what the script sent."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest

from tests.e2e.conftest import Page

EVIL = ":red[evil] **bold** [x](javascript:alert(1)) <b>pwn</b> $x^2$"
LINK = {
    "d_model": "1024",
    "dk_auto": "false",
    "d_head": "1024",
    "heads": "32",
    "kv": "32",
    "layers": "6",
    "ffn": "true",
    "text": " ".join(f"word{i % 50}" for i in range(600)),
}


# Each page is opened once, then checked and shot at both window sizes (Page.sizes).
def test_model_name_is_shown_literally(page) -> None:
    page.open(f"pretrained?model={quote(EVIL)}")
    for _ in page.sizes():
        alert = page.page.locator('[data-testid="stAlertContentError"]').first
        alert.wait_for(timeout=30_000)
        text = alert.inner_text()
        assert ":red[evil]" in text and "**bold**" in text and "<b>pwn</b>" in text
        assert page.count('a[href^="javascript"]') == 0  # no link was made
        assert page.count("[data-testid=stMain] b") == 0  # no bold from the name
        assert page.count(".katex") == 0  # no LaTeX from $x^2$
        page.shot("hostile-model-name")


def test_over_budget_link_gets_a_message(page) -> None:
    page.open(f"?{urlencode(LINK)}")
    for _ in page.sizes():
        alert = page.page.locator('[data-testid="stAlertContentError"]').first
        alert.wait_for(timeout=30_000)
        assert "3.2 GiB" in alert.inner_text()
        assert page.count(".js-plotly-plot") == 0  # nothing computed
        page.shot("hostile-link")


@pytest.mark.parametrize("size", [(1280, 800)])
def test_long_second_sentence_is_named(browser, server, size) -> None:
    page = Page(browser, server, *size).open("")
    pair = page.page.get_by_role("textbox", name="Second sentence (optional)")
    pair.fill("word " * 2000)
    pair.press("Enter")
    page.settle()
    warning = page.page.locator('[data-testid="stAlertContentWarning"]').first
    warning.wait_for(timeout=30_000)
    assert "second sentence has 2000 tokens" in warning.inner_text()
    page.shot("hostile-long-pair")
    page.close()


@pytest.fixture(scope="module")
def public_server():
    from tests.e2e.conftest import ROOT
    from tests.wsclient import server

    with server(env={"ATTNVIZ_PUBLIC": "1"}, log=ROOT / "out" / "e2e-public.log") as (port, _):
        yield f"http://127.0.0.1:{port}"


def test_public_mode_offers_a_list_and_hides_paths(browser, public_server) -> None:
    page = Page(browser, public_server).open("pretrained?model=%2Fetc")
    try:
        for _ in page.sizes():
            box = page.page.get_by_role("combobox", name="Model (this server's list)")
            box.wait_for(timeout=60_000)
            body = page.page.locator("[data-testid=stMain]").inner_text()
            assert "/etc" not in body
            page.wait_count(".js-plotly-plot", 1, timeout=60, at_least=True)  # the model runs
            page.shot("public-mode-bert")
    finally:
        page.close()
