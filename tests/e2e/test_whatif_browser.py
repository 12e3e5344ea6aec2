"""The what-if panel in a real browser: it must not push the views down the page."""

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


def _pick(page, label: str, typed: str) -> None:
    """Type and pick in a what-if multiselect, then wait for the rerun it starts: until the
    address bar has changed (a fixed wait missed the rerun on a loaded machine)."""
    page.settle()  # the panel just opened: no rerun under way while typing
    before = page.page.url
    box = page.page.locator(f'[data-testid="stMultiSelect"]:has-text("{label}") input').first
    box.wait_for(state="visible", timeout=30_000)
    box.click()
    box.type(typed)
    box.press("Enter")
    box.press("Escape")
    for _ in range(150):  # 30 s
        if page.page.url != before:
            break
        page.page.wait_for_timeout(200)
    page.settle()


def test_what_if_pickers_take_exactly_what_is_typed(page) -> None:
    # Regression: typing L3H1 + Enter silenced L3H1, L3H10 and L3H11 ("Select 3 matches" was
    # highlighted); typing 1 + Enter hid 6 tokens; the URL held labels (b_mask=1%3A+the).
    page.open("pretrained")
    page.page.get_by_text("What if…").first.click()
    _pick(page, "Silence heads", "L3H1")
    assert "wi_silence=L3H1" in page.page.url and "L3H10" not in page.page.url, page.page.url
    _pick(page, "Hide tokens", "1")
    query = page.page.url.split("?", 1)[1]
    assert "wi_hide=1&" in query + "&" and query.count("wi_hide=") == 1, query  # a position
    page.shot("what-if-exact-picks")
    page.open(f"pretrained?{query}")  # the link reopens both picks
    page.page.get_by_text("What if…").first.click()
    page.settle()
    boxes = page.page.locator('[data-testid="stMultiSelect"]').all_inner_texts()
    said = " | ".join(boxes)
    assert "L3H1" in said and "L3H10" not in said and "1: the" in said, said
