"""Projector mode: the toggle in the URL grows figure fonts and turns tables into
HTML tables that grow with the page; every page runs with it in both languages."""

from __future__ import annotations

import json

import pytest
import torch

from attnviz.views import charts, spec
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from attnviz.views.projector import enlarge
from tests.apphelpers import app

PAGES = [
    None,
    "app_pages/pretrained.py",
    "app_pages/step_by_step.py",
    "app_pages/why_scale.py",
    "app_pages/masks.py",
    "app_pages/multihead.py",
    "app_pages/sharing.py",
    "app_pages/positions.py",
    "app_pages/reproduce.py",
]


def test_enlarge_grows_every_font_and_keeps_many_column_numbers_apart() -> None:
    numbers = Marks(numbers=True)
    small = draw_map(torch.tensor([[0.1, 0.2], [0.3, 0.4]]), Axis(["a", "b"]), Axis(["c", "d"]),
                     Colour(), numbers, Frame("t", 300))  # fmt: skip
    enlarge(small)
    assert small.layout.font.size == 18 and small.layout.height == 360
    assert small.layout.xaxis.tickfont.size == 17 and small.data[0].textfont.size == 15
    wide = draw_map(torch.full((2, 12), 0.1), Axis(list("abcdefghijkl")), Axis(["c", "d"]),
                    Colour(bar="weights"), numbers)  # fmt: skip
    enlarge(wide)
    assert wide.data[0].textfont.size == 15  # every number grows (pages give it the room)
    assert wide.data[0].colorbar.title.font.size == 15  # the colour bar's title too
    zh = draw_map(torch.full((2, 2), 0.1), Axis(["a", "b"]), Axis(["c", "d"], "查询"), Colour(),
                  numbers)  # fmt: skip
    enlarge(zh)
    assert zh.layout.annotations[0].text == "查询" and zh.layout.annotations[0].font.size == 17
    with pytest.raises(ValueError):
        enlarge(small, 0)


@pytest.mark.parametrize("lang", ["English", "中文"])
@pytest.mark.parametrize("page", PAGES, ids=lambda p: (p or "playground").split("/")[-1])
def test_every_page_runs_in_projector_mode(page, lang: str) -> None:
    at = app(page, query={"projector": "true", "lang": lang})
    assert not at.exception
    assert at.toggle(key="projector").value is True
    fonts = [
        json.loads(c.proto.spec)["layout"].get("font", {}).get("size")
        for c in at.get("plotly_chart")
    ]
    assert fonts and all(size is None or size >= 18 for size in fonts), fonts
    assert not at.dataframe  # tables are HTML tables in projector mode


def test_a_table_of_sentences_wraps_outside_projector_mode_too() -> None:
    """MHA · MQA · GQA's comparison has sentences in its cells: a dataframe cut them off at
    1280 px ("fast decoding, smallest cache; s"), an HTML table wraps them."""
    at = app("app_pages/sharing.py")
    assert not at.exception and not at.dataframe
    (table,) = at.table
    cells = table.value.to_string()
    assert "1,048,576" in cells  # d_model 512, 8 heads: W_q, W_k, W_v, W_o of one layer
    assert "the usual compromise" in cells


def test_the_mosaic_is_sized_for_the_narrower_page_of_projector_mode() -> None:
    from attnviz.views import panels as views

    def mosaic_height(at) -> int:
        mosaic = next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-mosaic"))
        return json.loads(mosaic.proto.spec)["layout"]["height"]

    plain = mosaic_height(app("app_pages/pretrained.py", query={"view": "overview"}))
    big = mosaic_height(
        app("app_pages/pretrained.py", query={"view": "overview", "projector": "true"})
    )
    # 6 layers x 12 heads of 48 px thumbnails (4 px apart): the image is 628 x 316 px, drawn at
    # most MOSAIC_WIDTH (or MOSAIC_WIDTH_PROJECTOR) wide, plus 70 px of title and labels.
    assert plain == int(316 * views.MOSAIC_WIDTH / 628) + 70
    assert big == int(316 * views.MOSAIC_WIDTH_PROJECTOR / 628) + 70


def test_a_line_break_in_a_title_is_kept_and_nothing_else_becomes_markup() -> None:
    """Why √d_k's three charts share a third of the page each: their titles break into two lines
    (a "\\n" in the string), and the top margin grows by a line so the title stays off the plot."""
    from attnviz.i18n import translate

    for lang in ("en", "zh"):
        title = translate("ws.jac_title", lang)
        fig = charts.lines([1, 2], {"a": [1.0, 2.0]}, title=title)
        assert fig.layout.title.text.count("<br>") == 1 == title.count("\n")
        assert fig.layout.margin.t == 40 + spec.TITLE_LINE_PX
    typed = charts.lines([1, 2], {"a": [1.0, 2.0]}, title="<br><b>x</b>")
    assert typed.layout.title.text == "&lt;br&gt;&lt;b&gt;x&lt;/b&gt;"
    assert typed.layout.margin.t == 40
