"""The Chinese UI in a real browser at a desktop and a laptop size, with screenshots to look at."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import Page

ZH = "lang=%E4%B8%AD%E6%96%87"
# url path -> extra query: each page in a state that shows its tables and panels.
PAGES = {
    "": "view=query",
    "pretrained": "wi_scale=false&view=stats",
    "step_by_step": "",
    "why_scale": "",
    "multihead": "",
    "positions": "po_b=%E7%8C%AB%E5%92%AC%E4%BA%BA",
    "sharing": "",
}
ENGLISH_DEFAULTS = re.compile(r"Choose options|Choose an option|No results|\bNone\b")


@pytest.mark.parametrize("path", list(PAGES))
def test_chinese_page(path: str, page) -> None:
    # Opened as a teacher types it (?lang=zh): the address bar names the language (the picker's
    # label) from the first run, so a link copied at once reopens in Chinese.
    p = page
    query = "&".join(q for q in ("lang=zh", PAGES[path]) if q)
    p.open(f"{path}?{query}")
    p.wait_count('[data-testid="stPlotlyChart"]', 1, timeout=90, at_least=True)
    # The sentence follows the language, but on the Pretrained page the bundled
    # English model keeps the English one (Chinese would be [UNK]).
    box = '[data-testid="stSidebar"] textarea'  # filled by a run after the first chart, at load
    p.page.wait_for_function(f"() => document.querySelector('{box}')?.value", timeout=30_000)
    sentence = p.page.locator(box).first.input_value()
    english = "The animal didn't cross the street because it was too tired"
    assert sentence == (english if path == "pretrained" else "那只动物没有过马路，因为它太累了。")
    for _ in p.sizes():  # one run of the page, checked and shot at both window sizes
        assert ZH in p.page.url and "lang=zh" not in p.page.url, p.page.url
        text = p.page.locator('[data-testid="stApp"]').inner_text()
        assert not ENGLISH_DEFAULTS.search(text), ENGLISH_DEFAULTS.search(text).group()
        labels = p.page.locator('[data-testid="stMetricLabel"]')
        for i in range(labels.count()):  # a metric label cut with "…" hides what the number is
            cut = labels.nth(i).evaluate(
                "e => [e, ...e.querySelectorAll('*')].some(x => x.scrollWidth > x.clientWidth + 1)"
            )
            assert not cut, f"{labels.nth(i).inner_text()} at {p.size}"
        # plotly turns a y axis title by 90°: Chinese titles go upright above the axis instead
        sideways = p.page.evaluate(ROTATED_CJK)
        assert not sideways, f"{sideways} at {p.size}"
        p.shot(f"zh-{path or 'playground'}")


# y axis titles (plotly's .ytitle, drawn rotated) that hold Chinese, Japanese or Korean text
ROTATED_CJK = """() => [...document.querySelectorAll('.ytitle')].map(e => e.textContent)
  .filter(text => /[\u2e80-\u9fff\uac00-\ud7af\uff00-\uffef]/.test(text))"""


def test_chinese_lines_label_every_token_whole_and_long_inputs_with_positions(page) -> None:
    """Lines in two rows (Chinese): the first and last labels ([CLS], [SEP]) are drawn whole,
    not clipped at the chart's edge ("OS]"); a long input's sparse labels say their positions."""
    poem = "床前明月光，疑是地上霜。举头望明月，低头思故乡。" * 6  # ~150 characters
    p = page
    p.open(f"pretrained?{ZH}&model=attnviz-char-zh-en&view=lines&text={poem}")
    p.wait_count('[data-testid="stPlotlyChart"]', 1, timeout=120, at_least=True)
    for _ in p.sizes():
        edges = p.page.evaluate(LABEL_EDGES)  # every label's box inside its chart's box
        assert edges["labels"] > 10 and not edges["outside"], edges
        assert edges["positions"], "sparse labels say their position"
        p.shot("zh-lines-long")


LABEL_EDGES = r"""() => {
  const out = {labels: 0, outside: [], positions: 0};
  for (const chart of document.querySelectorAll('[data-testid=stPlotlyChart]')) {
    const box = chart.getBoundingClientRect();
    for (const t of chart.querySelectorAll('.scatterlayer .textpoint text')) {
      if (!t.textContent.trim()) continue;
      out.labels++;
      if (/^\d+: /.test(t.textContent)) out.positions++;
      const r = t.getBoundingClientRect();
      if (r.left < box.left - 1 || r.right > box.right + 1) out.outside.push(t.textContent);
    }
  }
  return out;
}"""


def test_a_chinese_browser_names_its_language_in_the_link_at_once(browser, server) -> None:
    # No ?lang= in the link, a browser set to Chinese: the page opens in Chinese and the address
    # bar says so from the first run (before: only after the first change).
    p = Page(browser, server, locale="zh-CN")
    try:
        p.open("why_scale")
        for _ in p.sizes():
            assert ZH in p.page.url, p.page.url
            assert p.page.locator("h1").first.inner_text().startswith("为什么")
            p.shot("zh-browser-locale")
    finally:
        p.close()
