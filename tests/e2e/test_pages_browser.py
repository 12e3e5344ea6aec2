"""Every page in a real browser, in both languages, with screenshots for the README tour."""

from __future__ import annotations

import sys

import pytest

from tests.apphelpers import pages as app_pages
from tests.e2e.conftest import ROOT, Page, app_process

HEATMAPS = '[data-testid="stPlotlyChart"] .heatmaplayer'


# Each page is opened once and checked and shot at both window sizes (Page.sizes).
def test_pretrained_page_overview_and_what_if(page) -> None:
    p = page
    p.open("pretrained")
    for _ in p.sizes():
        assert p.wait_count('[data-testid="stPlotlyChart"]', 4, timeout=90, at_least=True) >= 4
        p.shot("bert")
    p.open("pretrained?wi_scale=false&wi_hide=2%3A+animal")
    for _ in p.sizes():
        assert p.wait_count('[data-testid="stMetric"]', 3, timeout=60) == 3
        assert "0." in p.page.locator('[data-testid="stMetricValue"]').first.inner_text()
        p.shot("bert-what-if")


def test_pretrained_page_toggle_scaling_in_the_browser(page) -> None:
    page.open("pretrained")
    assert page.count('[data-testid="stMetric"]') == 0
    page.page.get_by_text("What if…").first.click()  # the knobs are folded away by default
    page.page.get_by_text("÷ √d_k").first.click()
    page.settle()
    assert page.wait_count('[data-testid="stMetric"]', 3, timeout=60) == 3


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_step_by_step_walks_forward(big_page, lang: str) -> None:
    big_page.open(f"step_by_step?lang={lang}")
    nxt = big_page.page.get_by_role(
        "button", name="Next step ▶" if lang == "English" else "下一步 ▶"
    )
    for _ in range(3):
        nxt.click()
        big_page.settle()
    assert big_page.page.get_by_text("4 ·").count() >= 1
    assert nxt.is_disabled()
    big_page.shot("step-by-step-" + ("en" if lang == "English" else "zh"))


def test_sharing_page(page) -> None:
    p = page
    p.open("sharing?sh_kv=2")
    for _ in p.sizes():
        assert p.wait_count(HEATMAPS, 2) == 2
        p.shot("sharing")


@pytest.mark.parametrize("name", ["why_scale", "multihead", "positions"])
def test_lesson_pages(name: str, page) -> None:
    p = page
    p.open(name)
    for _ in p.sizes():
        assert p.wait_count('[data-testid="stPlotlyChart"]', 4, timeout=60, at_least=True) >= 4
        p.shot(name)
    p.open(f"{name}?lang=中文")
    for _ in p.sizes():
        p.shot(f"{name}-zh")


def _next(p) -> None:
    p.page.locator('[data-testid="stPageLink"] a').last.click()  # the lesson's Next link
    p.settle()


def test_streamlit_run_app_py_from_the_repository_root(browser, tmp_path) -> None:
    # The command every Streamlit user tries first starts the same app, and its
    # lesson links (resolved against the main script's folder by Streamlit) lead on: Next from
    # Why √d_k opens Masks as the lesson's link for it does, with 我爱水课.
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--browser.gatherUsageStats",
               "false"]  # fmt: skip
    with app_process(command, tmp_path / "root-app.log", ROOT) as (url, _):
        p = Page(browser, url)
        try:
            p.open("why_scale")
            _next(p)
            assert p.page.url.split("?")[0].endswith("/masks"), p.page.url
            assert "text=%E6%88%91%E7%88%B1%E6%B0%B4%E8%AF%BE" in p.page.url  # 我爱水课
            for _ in p.sizes():
                assert p.page.locator("h1").filter(has_text="Masks").count() == 1
                assert p.wait_count(HEATMAPS, 1, timeout=60, at_least=True) >= 1
                p.shot("root-app-masks")
        finally:
            p.close()


def test_lesson_next_carries_only_what_the_next_page_means(page) -> None:
    # Regression: Next x4 from the Masks page's lesson link reached the Pretrained finale with
    # 我爱水课 and its English pair: Link two tokens showed "courses" -> "love". Each Next now
    # opens its page as the lesson's link for it does; the finale opens on it -> animal (in
    # Chinese too: the bundled English model keeps the English sentence).
    p = page
    p.open("masks?text=我爱水课&pair=I+really+love+easy+courses&lang=中文")
    for _ in range(4):  # Multi-head & cost, MHA · MQA · GQA, Positions & norms, BERT
        _next(p)
    assert p.page.url.split("?")[0].endswith("/pretrained"), p.page.url
    assert "text=" not in p.page.url and "pair=" not in p.page.url, p.page.url
    picked = p.page.locator('[data-testid="stSelectbox"] input')
    p.wait_count('[data-testid="stSelectbox"]', 5, timeout=120, at_least=True)
    for _ in p.sizes():
        chosen = picked.evaluate_all("es => es.map(e => e.value)")
        assert "10: it" in chosen and "2: animal" in chosen, chosen
        p.shot("lesson-end-zh")


def test_every_page_is_in_the_navigation(page) -> None:
    page.open()
    links = page.page.locator('[data-testid="stSidebarNav"] a')
    pages = len(app_pages())
    assert pages == 12  # Explore: 5 (with Generate, Atlas, Reproduce); Lesson path: 7
    assert links.count() == pages
    for i in range(pages):
        links.nth(i).click()
        page.settle()


# For every chart: its title's right edge against the chart's, and pairs of cell numbers that
# overlap (plotly draws a heatmap's numbers as `.heatmaplayer text`).
FITS = """() => [...document.querySelectorAll('[data-testid=stPlotlyChart]')].map(ch => {
  const t = ch.querySelector('.gtitle'), c = ch.getBoundingClientRect();
  const boxes = [...ch.querySelectorAll('.heatmaplayer text')]
    .filter(e => e.textContent.trim()).map(e => e.getBoundingClientRect());
  let overlaps = 0;
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1) overlaps++;
  }
  return {title: t ? t.textContent : '', cut: t ? t.getBoundingClientRect().right > c.right : false,
          numbers: boxes.length, overlaps: overlaps};
})"""


@pytest.mark.parametrize("name", ["why_scale", "positions"])
def test_chart_titles_and_cell_numbers_fit(name: str, page) -> None:
    """At 1280 px, three charts in a row cut Why √d_k's titles off and ran LayerNorm/BatchNorm's
    numbers into each other: titles now break their line, the norms go two to a row."""
    p = page
    for lang in ("English", "中文"):
        p.open(f"{name}?lang={lang}")
        p.wait_count('[data-testid="stPlotlyChart"]', 4, timeout=60, at_least=True)
        p.page.wait_for_timeout(1500)  # plotly draws after the script ends
        for _ in p.sizes():
            charts = p.page.evaluate(FITS)
            assert [c for c in charts if c["cut"]] == [], f"{name} {lang} at {p.size}"
            assert [c for c in charts if c["overlaps"]] == [], f"{name} {lang} at {p.size}"
            if name == "positions":  # the three norm matrices, 5 x 8 numbers each
                assert sum(c["numbers"] == 40 for c in charts) >= 3, charts
