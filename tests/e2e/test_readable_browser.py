"""Every page readable: no text drawn over other text, none cut off, at 1280x800 and 1920x1080,
plain and projector mode, English and 中文.

One server, one browser, one tab for the whole file: each page is opened once per language and
mode, then checked at both window sizes by one JS function (OFFENDERS) that returns the offending
text boxes. A token is text like any other.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import SIZES, Page

PAGES = ["playground", "pretrained", "generate", "atlas", "step_by_step", "why_scale", "lab",
         "masks", "multihead", "sharing", "positions"]  # fmt: skip
STATES = [("English", False), ("English", True), ("中文", False), ("中文", True)]

# Returns one line per offence, e.g. "masks chart 3 'Logits': cell text '-3.76' overlaps '-0.93'".
#  - SVG text in a Plotly chart, each box as the browser drew it (rotation included: four screen
#    corners from getBBox and getScreenCTM, compared by separating axes): the tick labels of one
#    axis, and the numbers of one trace (a matrix's cells, a bar's labels), must not overlap each
#    other, nor the titles (the chart's, the axes', annotations); tick labels and titles must lie
#    inside the chart.
#  - HTML text in tables (st.table, projector mode's HTML tables): a cell's text must not overlap
#    its neighbour's, nor be cut by a box that hides its overflow (a table that scrolls sideways
#    shows all of its text).
OFFENDERS = """() => {
  const out = [], SLACK = 1.5;
  const shown = el => {
    for (let e = el; e && e.nodeType === 1; e = e.parentNode) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || +s.opacity === 0) return false;
      if (e.tagName === 'svg' || e.tagName === 'BODY') break;
    }
    return el.textContent.trim() !== '';
  };
  // A text's four corners on the screen; its box is shrunk by the line gap a font's box keeps
  // above and below the glyphs (a fifth of its height), so that stacked lines that only touch pass.
  const corners = el => {
    const b = el.getBBox(), m = el.getScreenCTM();
    if (!b.width || !b.height || !m) return null;
    const dy = b.height * 0.2;
    return [[b.x, b.y + dy], [b.x + b.width, b.y + dy], [b.x + b.width, b.y + b.height - dy],
            [b.x, b.y + b.height - dy]].map(([x, y]) => [m.a * x + m.c * y + m.e,
                                                          m.b * x + m.d * y + m.f]);
  };
  const apart = (p, q) => {  // separating axis theorem for two convex quadrilaterals
    for (const poly of [p, q]) for (let i = 0; i < 4; i++) {
      const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % 4];
      const nx = y1 - y2, ny = x2 - x1, len = Math.hypot(nx, ny) || 1;
      const proj = r => r.map(([x, y]) => (x * nx + y * ny) / len);
      const a = proj(p), c = proj(q);
      if (Math.max(...a) <= Math.min(...c) + SLACK || Math.max(...c) <= Math.min(...a) + SLACK)
        return true;
    }
    return false;
  };
  const crowded = (texts, what, name) => {  // pairs that overlap, sorted along x to stay fast
    const items = texts.filter(shown).map(el => ({el, c: corners(el)})).filter(i => i.c);
    items.forEach(i => { i.x0 = Math.min(...i.c.map(p => p[0]));
                         i.x1 = Math.max(...i.c.map(p => p[0])); });
    items.sort((a, b) => a.x0 - b.x0);
    let found = 0;
    for (let i = 0; i < items.length && found < 3; i++)
      for (let j = i + 1; j < items.length && items[j].x0 < items[i].x1 && found < 3; j++)
        if (!apart(items[i].c, items[j].c)) {
          found++;
          out.push(`${name}: ${what} '${items[i].el.textContent}' overlaps ` +
                   `'${items[j].el.textContent}'`);
        }
  };
  const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')];
  charts.forEach((chart, k) => {
    const svg = chart.querySelector('.main-svg');
    if (!svg || !chart.offsetParent) return;
    const title = chart.querySelector('.gtitle');
    const name = `chart ${k} '${(title ? title.textContent : '').slice(0, 30)}'`;
    const box = svg.getBoundingClientRect();
    for (const layer of chart.querySelectorAll('[class*=axislayer-above]'))
      crowded([...layer.querySelectorAll('.xtick text, .ytick text')], 'tick label', name);
    for (const trace of chart.querySelectorAll('.trace, .hm'))
      crowded([...trace.querySelectorAll(
        ':scope > text, .textpoint text, .point text, .heatmap-label text')], 'number', name);
    const labels = 'text[class*=title], .annotation-text, .gtitle';
    crowded([...chart.querySelectorAll(labels)], 'title', name);
    const inside = [...chart.querySelectorAll(`[class*=axislayer-above] text, ${labels}`)];
    for (const el of inside) {
      if (!shown(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.left < box.left - SLACK || r.right > box.right + SLACK ||
          r.top < box.top - SLACK || r.bottom > box.bottom + SLACK)
        out.push(`${name}: '${el.textContent.slice(0, 40)}' is cut by the chart's edge ` +
                 `[${Math.round(r.left - box.left)}, ${Math.round(box.right - r.right)}]`);
    }
  });
  const textBox = el => {
    const range = document.createRange();
    range.selectNodeContents(el);
    return range.getBoundingClientRect();
  };
  const main = document.querySelector('[data-testid=stMain]');
  for (const table of main.querySelectorAll('table')) {
    if (!table.offsetParent) continue;
    for (const row of table.rows) {
      let last = null;
      for (const cell of row.cells) {
        if (!cell.textContent.trim()) continue;
        const r = textBox(cell);
        if (last && r.left < last.r.right - SLACK && r.top < last.r.bottom && r.bottom > last.r.top)
          out.push(`table: '${cell.textContent.trim()}' overlaps '${last.text}'`);
        last = {r, text: cell.textContent.trim()};
        for (let e = cell; e && e !== main; e = e.parentElement) {
          const s = getComputedStyle(e);
          if (s.overflowX === 'auto' || s.overflowX === 'scroll') break;  // scrolls to it
          if (s.overflowX !== 'hidden' && s.overflowX !== 'clip' && s.textOverflow !== 'ellipsis')
            continue;
          const c = e.getBoundingClientRect();
          if (r.left < c.left - SLACK || r.right > c.right + SLACK) {
            out.push(`table: '${cell.textContent.trim().slice(0, 30)}' is cut by its box`);
            break;
          }
        }
      }
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def tab(browser, server):
    p = Page(browser, server)
    yield p
    p.close()


def _open(tab: Page, name: str, lang: str, projector: bool) -> None:
    path = "" if name == "playground" else name
    tab.page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
    tab.open(f"{path}?lang={lang}" + ("&projector=true" if projector else ""))
    # every chart drawn (the Training lab has none until a run): as many svgs as charts
    charts = tab.count('[data-testid="stPlotlyChart"]')
    tab.wait_count('[data-testid="stPlotlyChart"] .main-svg', charts, timeout=30, at_least=True)
    if projector:  # the style element is part of the run: wait until it applies
        tab.page.wait_for_function(
            "() => getComputedStyle(document.documentElement).fontSize === '20px'", timeout=15_000
        )
    tab.relayout()


@pytest.mark.parametrize("name", PAGES)
def test_every_text_readable(tab: Page, name: str) -> None:
    found = []
    for lang, projector in STATES:
        _open(tab, name, lang, projector)
        for _ in tab.sizes():
            state = f"{name} {tab.size} {'projector ' if projector else ''}{lang}"
            offences = tab.page.evaluate(OFFENDERS)
            if offences:
                tab.shot(f"readable-{name}-{'zh' if lang != 'English' else 'en'}"
                         f"{'-projector' if projector else ''}")  # fmt: skip
            found += [f"{state}: {line}" for line in offences]
    assert not found, f"{len(found)} unreadable texts:\n" + "\n".join(found[:40])


def test_the_check_sees_overlap_and_cuts(tab: Page) -> None:
    """OFFENDERS itself: numbers drawn over each other, a label past the edge, a clipped cell."""
    tab.open("why_scale")
    tab.page.evaluate(
        """() => {
      const main = document.querySelector('[data-testid=stMain]');
      const div = document.createElement('div');
      div.innerHTML = `<div data-testid="stPlotlyChart"><svg class="main-svg" width="200"
        height="100"><text class="gtitle" x="-30" y="20">Cut title</text>
        <g class="trace"><g class="textpoint"><text x="50" y="50">-3.76</text></g>
        <g class="textpoint"><text x="60" y="50">-0.93</text></g></g></svg></div>
        <table style="width:60px;overflow:hidden;display:block"><tr>
        <td style="white-space:nowrap">a-very-long-cell-text</td></tr></table>`;
      main.prepend(div);
    }"""
    )
    found = " | ".join(tab.page.evaluate(OFFENDERS))
    assert re.search(r"number '-3.76' overlaps '-0.93'", found), found
    assert "'Cut title' is cut" in found, found
    assert "'a-very-long-cell-text' is cut" in found, found
