"""attnviz.show: the app's figures outside the app, the same as the running page draws
(docs/notebook_example.ipynb runs in tests/test_notebook_example.py)."""

from __future__ import annotations

import json

import pytest

import attnviz
from attnviz.ui.sidebar import DEFAULT_TEXT
from attnviz.views.notebook import VIEWS
from attnviz.views.spec import Spec, for_browser
from tests.apphelpers import app, specs


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace_model(attnviz.load_model(device="cpu"), DEFAULT_TEXT)


def same_figure(ours, page_spec: dict) -> None:
    """The page draws the figure the notebook gets, as views.spec.for_browser sends a map to the
    browser (without a template, the theme's look on its layout)."""
    sent = for_browser(ours)
    mine = sent.to_dict() if isinstance(sent, Spec) else json.loads(ours.to_json())
    assert mine["data"] == page_spec["data"]
    assert mine["layout"]["title"] == page_spec["layout"]["title"]


@pytest.mark.parametrize(
    ("view", "query", "selection"),
    [
        ("overview", {"layer": "3", "head": "7"}, dict(layer=3, head=7)),
        ("detail", {"layer": "2", "head": "5"}, dict(layer=2, head=5)),
        ("query", {"layer": "1", "head": "4", "query": "3"}, dict(layer=1, head=4, query=3)),
        ("outputs", {"layer": "4", "head": "2"}, dict(layer=4, head=2)),
        ("heads", {"layer": "2"}, dict(layer=2)),
        ("rollout", {"layer": "3", "query": "4"}, dict(layer=3, query=4)),
    ],
)
def test_show_returns_the_figures_the_page_draws(trace, view, query, selection) -> None:
    at = app("app_pages/pretrained.py", query={"view": view, **query})
    assert not at.exception, at.exception
    page = specs(at)
    mine = list(attnviz.show(trace, view=view, **selection))  # one View, its figures inside
    # The page draws the view last (after the what-if panel); compare those charts.
    tail = page[-len(mine) :]
    if view == "overview":  # the overview page also draws the head detail below the mosaic
        tail = [next(s for s in page if s["data"][0]["type"] == "image")]
    if view == "heads":  # three columns: the page lists heads 0, 3, 6, 9, 1, 4...
        tail = sorted(tail, key=lambda s: int(s["layout"]["title"]["text"].split()[-1]))
    for fig, spec in zip(mine, tail, strict=True):
        same_figure(fig, spec)


def test_show_rejects_what_it_cannot_draw(trace) -> None:
    with pytest.raises(ValueError, match="view='sankey' is not a view: use one of heads"):
        attnviz.show(trace, view="sankey")
    with pytest.raises(ValueError, match=r"layer=9 is outside the trace: pick 0\.\.5"):
        attnviz.show(trace, view="detail", layer=9)
    with pytest.raises(TypeError, match="colour"):
        attnviz.show(trace, view="detail", colour="red")
    assert set(VIEWS) >= {"overview", "detail", "heads", "lines", "rollout", "query", "link"}
    lines = attnviz.show(trace, view="lines", layer=5, head=11)
    assert lines.layout.meta["lines"] > 0  # the lines view draws one head's strong links
    assert attnviz.show(trace, view="detail", lang="zh")[2].layout.title.text == "softmax 权重"
