"""Links and pickers in a real browser: what the address bar holds reopens the page, the
view picker keeps its view through a run without the explorer, load failures say so."""

from __future__ import annotations

import time

# The view picker is the page's first button group (the colour-scale picker of a view is another).
# the view picker: the button group that offers Head detail (the Pretrained page's Tokens switch
# "pieces | words" may stand before it)
VIEW = '[data-testid="stButtonGroup"]:has(button:has-text("Head detail")) >> button[role="radio"]'
# the box for a typed name, under the model picker
MODEL = '[data-testid="stSidebar"] input[aria-label^="Or another model"]'


def _wait(p) -> None:
    time.sleep(0.6)
    p.settle()


def _selected_views(p) -> list[str]:
    buttons = p.page.locator(VIEW)
    return [
        buttons.nth(i).inner_text()
        for i in range(buttons.count())
        if buttons.nth(i).get_attribute("aria-checked") == "true"
    ]


def _type(p, selector: str, value: str, submit: str = "Enter") -> None:
    box = p.page.locator(selector).first
    box.fill(value)
    box.press(submit)
    _wait(p)


def _slider(p, label: str):
    return p.page.locator(f'input[type="range"][aria-label^="{label}"]').first


def _press(p, label: str, key: str) -> None:
    thumb = _slider(p, label)
    thumb.focus()
    thumb.press(key)
    _wait(p)


def test_view_picker_keeps_its_view_after_a_bad_model_and_an_empty_sentence(page) -> None:
    # Regression: after a failed load (or an empty sentence) the picker showed no view, and the next
    # change dropped the page back to the overview.
    page.open("pretrained")
    page.page.locator(VIEW).filter(has_text="Head detail").click()
    _wait(page)
    assert _selected_views(page) == ["Head detail"]
    _type(page, MODEL, "no-such-org/no-such-model-xyz")
    _type(page, MODEL, "")
    assert _selected_views(page) == ["Head detail"]
    _type(page, '[data-testid="stSidebar"] textarea', "", submit="Control+Enter")
    _type(page, '[data-testid="stSidebar"] textarea', "The cat sat", submit="Control+Enter")
    assert _selected_views(page) == ["Head detail"]
    page.page.get_by_text("What if…").first.click()  # the knobs are folded away by default
    page.page.get_by_text("÷ √d_k").first.click()  # the next change keeps the view
    _wait(page)
    assert _selected_views(page) == ["Head detail"]
    assert "view=detail" in page.page.url


def test_failed_model_load_says_it_failed(page) -> None:
    # Regression: the status kept reading "Finding no-such-org/..." after the load had failed.
    page.open("pretrained")
    _type(page, MODEL, "no-such-org/no-such-model-xyz")
    status = page.page.locator('[data-testid="stExpander"]').first.inner_text()
    assert "Finding" not in status and "Loading" not in status
    assert "no-such-model-xyz" in page.page.locator('[data-testid="stAlert"]').first.inner_text()


def test_embedding_cosine_label_is_not_cut_at_1280(page) -> None:
    # Regression: "Sentence embedding cosine t…" was cut at 1280 px.
    page.open("pretrained?wi_scale=false")
    label = page.page.locator('[data-testid="stMetricLabel"]').first
    label.wait_for()
    cut = label.evaluate(
        "e => [e, ...e.querySelectorAll('*')].some(x => x.scrollWidth > x.clientWidth + 1)"
    )
    assert not cut, label.inner_text()


def test_playground_mqa_link_in_the_browser(page) -> None:
    # K/V heads kept in the real address bar: heads 8, K/V 1, heads 4 must keep K/V 1 in the link.
    page.open("")
    _press(page, "Heads h", "ArrowRight")  # 4 -> 8
    _press(page, "K/V heads", "Home")  # 8 -> 1 (MQA)
    _press(page, "Heads h", "ArrowLeft")  # 8 -> 4
    url = page.page.url
    assert "kv=1" in url and "heads=" not in url, url  # 4 heads is the default: left out
    page.page.goto(url)
    page.settle()
    assert _slider(page, "Heads h").get_attribute("aria-valuetext") == "4", url
    assert _slider(page, "K/V heads").get_attribute("aria-valuetext") == "1", url
    assert "kv=1" in page.page.url


def test_playground_settings_survive_a_visit_to_another_page(page) -> None:
    # The browser drops the query string on a page change; the sliders must come back as they were.
    page.open("")
    _press(page, "Heads h", "ArrowRight")  # 4 -> 8
    _press(page, "K/V heads", "Home")  # MQA
    page.page.locator('[data-testid="stSidebarNav"] a').nth(4).click()  # Multi-head & cost
    _wait(page)
    page.page.locator('[data-testid="stSidebarNav"] a').nth(0).click()  # back to the Playground
    _wait(page)
    assert _slider(page, "Heads h").get_attribute("aria-valuetext") == "8"
    assert _slider(page, "K/V heads").get_attribute("aria-valuetext") == "1"
    assert "heads=8" in page.page.url and "kv=1" in page.page.url


def test_an_old_bert_link_opens_the_pretrained_page_with_todays_keys(page) -> None:
    """The Pretrained page was /bert with b_* keys: a link saved then still opens the same view,
    and the address bar moves to today's path and names."""
    page.open("bert?b_ablate=L3H1&b_scale=false&view=overview")
    deadline = time.time() + 30
    while "/pretrained" not in page.page.url and time.time() < deadline:
        time.sleep(0.2)
    page.settle()
    url = page.page.url
    assert "/pretrained" in url and "/bert" not in url
    assert "wi_silence=L3H1" in url and "wi_scale=false" in url and "b_ablate" not in url
    assert "b_scale" not in url and "b_" not in url.split("?", 1)[1]
    main = page.page.locator('[data-testid="stMain"]')
    main.get_by_text("Silencing L3H1").first.wait_for(timeout=120_000)  # the bundled model loads
    page.settle()  # the what-if took the old link's silenced head
    assert not page.page.locator('[data-testid="stException"]').count()
    for sized in page.sizes():
        sized.shot("old-bert-link")
