"""Projector mode (build item 3): the toggle in the URL grows figure fonts and turns tables into
HTML tables that grow with the page; every page runs with it in both languages."""

from __future__ import annotations

import json

import pytest

from attnviz import figures
from attnviz.projector import enlarge
from tests.apphelpers import app

PAGES = [
    None,
    "app_pages/bert.py",
    "app_pages/step_by_step.py",
    "app_pages/why_scale.py",
    "app_pages/masks.py",
    "app_pages/multihead.py",
    "app_pages/sharing.py",
    "app_pages/positions.py",
]


def test_enlarge_grows_every_font_and_keeps_many_column_numbers_apart() -> None:
    small = figures.heatmap([[0.1, 0.2], [0.3, 0.4]], ["a", "b"], ["c", "d"], title="t",
                            show_values=True, height=300)  # fmt: skip
    enlarge(small)
    assert small.layout.font.size == 18 and small.layout.height == 360
    assert small.layout.xaxis.tickfont.size == 17 and small.data[0].textfont.size == 15
    wide = figures.heatmap([[0.1] * 12] * 2, list("abcdefghijkl"), ["c", "d"], show_values=True)
    enlarge(wide)
    assert wide.data[0].textfont.size == 11  # 12 columns: bigger digits would run together
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
