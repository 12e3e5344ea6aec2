"""The Pretrained page at 478 tokens in a real browser: every view legible, no tick label on
another."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

# 425 words of plain English that the bundled tokenizer splits into 478 tokens ([CLS] ... [SEP]).
LONG = (Path(__file__).parent / "long_478.txt").read_text().strip()
CHARTS = '[data-testid="stPlotlyChart"]'
LINES = f"{CHARTS} .scatterlayer path.js-line"  # the SVG lines view: one path a line

# For every chart: the boxes of its axis tick labels and its scatter text labels, and the pairs of
# them that collide. Plotly draws tick labels as `g.xtick text`. A label's box is its line box
# (about 1.4 font sizes: 17 px for a 12 px font), the glyphs at most one font size of it: two
# labels collide when their boxes overlap, both ways, by more than that padding.
OVERLAPS = """() => {
  const out = [];
  document.querySelectorAll('[data-testid=stPlotlyChart]').forEach((chart, c) => {
    for (const sel of ['g.xtick text', 'g.ytick text', 'g.textpoint text']) {
      const boxes = [...chart.querySelectorAll(sel)]
        .filter(e => e.textContent.trim() !== '')
        .map(e => {
          const r = e.getBoundingClientRect(), font = parseFloat(getComputedStyle(e).fontSize);
          return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                  font: font, line: 1.4 * font, text: e.textContent};
        }).filter(r => r.right > r.left && r.bottom > r.top);
      let bad = 0, pairs = [];
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        const pad = Math.max(a.line, b.line) - Math.max(a.font, b.font);
        if (w > pad && h > pad) { bad++; pairs.push([a.text, b.text]); }
      }
      out.push({chart: c, sel: sel, labels: boxes.length, overlaps: bad,
                pairs: pairs.slice(0, 5)});
    }
  });
  return out;
}"""


def url(view: str, **extra: str) -> str:
    return "pretrained?" + urllib.parse.urlencode({"view": view, "text": LONG, **extra})


def assert_legible(p, view: str) -> list[dict]:
    found = p.page.evaluate(OVERLAPS)
    bad = [f for f in found if f["overlaps"]]
    assert not bad, f"{view} at {p.size}: overlapping labels {bad}"
    assert any(f["labels"] >= 8 for f in found), f"{view} at {p.size}: almost no labels {found}"
    return found


VIEWS = {
    # view: (charts it draws, what proves the structure is there)
    "detail": 3,
    "heads": 1,  # every head's picture in one chart (views/grid.py): 12 images, checked below
    "overview": 2,  # the mosaic and the chosen head as an image (Head detail has the numbers)
    "lines": 1,
    "rollout": 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("view", list(VIEWS))
def test_every_view_at_478_tokens(view: str, page) -> None:
    # One trace and one run of the page, then every check and shot at both window sizes.
    p = page
    p.open(url(view))
    assert p.wait_count(CHARTS, VIEWS[view], timeout=90, at_least=True) >= VIEWS[view]
    if view == "heads":  # one picture a head of the layer, each drawn
        assert p.wait_count(f"{CHARTS} .imagelayer image", 12, timeout=60) == 12
    p.page.wait_for_timeout(1500)  # plotly draws after the script ends
    for _ in p.sizes():
        assert p.count(CHARTS) >= VIEWS[view]
        p.shot(f"long-{view}")
        assert_legible(p, view)


def stable_box(locator, tries: int = 40) -> dict:
    """The element's box once it stops moving: plotly lays a chart out again after it first
    appears, and a click at the first box once landed on token 0 instead of token 5."""
    last = None
    for _ in range(tries):
        box = locator.bounding_box()
        if box is not None and box == last:
            return box
        last = box
        locator.page.wait_for_timeout(250)
    raise AssertionError(f"the element kept moving: last box {last}")


def drawn(p) -> int:
    caption = p.page.get_by_text("Lines drawn:").first.inner_text()
    return int(caption.split("Lines drawn:")[1].split()[0])


def test_lines_view_draws_svg_and_a_click_isolates_a_token(big_page) -> None:
    # Up to SVG_LINES lines are SVG (software WebGL took seconds): one path a line. At w >= 0.02,
    # the default at this length, head 0 of layer 0 has 903 of them, token 6's row 3.
    from attnviz import load_model, trace_model

    w = trace_model(load_model(), LONG).layers[0].weights[0]  # [q, k] layer 0, head 0
    assert w.shape == (478, 478)
    p = big_page
    p.open(url("lines", lines_w="0.02"))
    want = int((w >= 0.02).sum())
    assert p.wait_count(LINES, want, timeout=60) == want == drawn(p)
    assert p.count(f"{CHARTS} canvas") == 0
    # click the query marker of token 6 ("cold"): only its row's lines stay
    marks = p.page.locator(f"{CHARTS} .scatterlayer .trace").filter(has=p.page.locator(".point"))
    box = stable_box(marks.first.locator(".point").nth(6))
    p.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    p.settle()
    assert "lines_focus=q6" in p.page.url
    want = int((w[6] >= 0.02).sum())
    assert p.wait_count(LINES, want, timeout=30) == want == drawn(p) > 0
    p.shot("long-lines-focus")


def test_overview_token_focus_shows_one_row_per_head(big_page) -> None:
    p = big_page
    p.open(url("overview", focus="5"))
    assert p.wait_count(CHARTS, 2, timeout=90, at_least=True) >= 2  # the mosaic and the head
    assert p.page.get_by_text("Each thumbnail is the row of").count() == 1
    p.shot("long-overview-focus")
