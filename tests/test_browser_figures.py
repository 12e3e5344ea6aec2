"""What the browser gets for a map (views.spec.for_browser): no template, a datarevision that
follows the data, the same numbers; and picture axes that never measure labels n² times."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from attnviz.views.spec import Spec, for_browser
from tests.apphelpers import decode

TOKENS = [f"t{i}" for i in range(12)]


def _heatmap(weights: torch.Tensor, masked=None) -> go.Figure:
    x, y = Axis(TOKENS, "key"), Axis(TOKENS, "query")
    return draw_map(weights, x, y, Colour(zmin=0.0, zmax=1.0), Marks(masked=masked), Frame("w"))


def _weights(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(12, 12, generator=g), dim=-1)  # [q, k]


def test_a_map_goes_without_template_with_its_numbers_and_hover() -> None:
    w = _weights(0)
    masked = torch.zeros(12, 12, dtype=torch.bool)
    masked[0, 5:] = True  # the first row may not see keys 5..11
    fig = _heatmap(w, masked)
    shown = for_browser(fig)
    assert isinstance(shown, Spec)
    out = shown.to_dict()
    assert "template" not in out["layout"] and "template" in fig.to_plotly_json()["layout"]
    z = decode(out["data"][0]["z"])  # [q, k] exactly the weights sent, masked cells empty
    expected = w.numpy().copy()
    expected[masked.numpy()] = np.nan
    np.testing.assert_array_equal(z, expected.astype(z.dtype))
    assert "%{z:.4f}" in out["data"][0]["hovertemplate"]  # hover still gives the value
    assert out["data"][0]["hoveron" + "gaps"] is False  # a masked cell shows no value
    own = fig.to_plotly_json()["layout"]
    for side in ("xaxis", "yaxis"):  # the figure's own axis, with what the theme gave it
        axis = out["layout"][side]
        assert {k: axis[k] for k in own[side] if k != "title"} == {
            k: v for k, v in own[side].items() if k != "title"
        }
        assert axis["title"]["text"] == own[side]["title"]["text"]
        assert axis["automargin"] is True  # labels never cut off by the figure's 10 px margins
    title = out["layout"]["title"]  # bold, as Streamlit's theme draws it; its text unchanged
    assert title["text"] == "w" and title["font"]["weight"] == "bold"


def test_datarevision_follows_the_data_only() -> None:
    a, a_again, b = (for_browser(_heatmap(_weights(s))) for s in (0, 0, 1))
    rev = [f.to_dict()["layout"]["datarevision"] for f in (a, a_again, b)]
    assert rev[0] == rev[1] != rev[2]
    cached = Spec(_heatmap(_weights(0)))  # a Spec kept per trace: its digest made once
    assert for_browser(cached).to_dict()["layout"]["datarevision"] == rev[0]
    assert "template" in cached.to_dict()["layout"]  # the kept Spec is not changed


def test_a_bar_chart_goes_without_template_and_without_tick_marks_or_minor_grid() -> None:
    # On the layout (not in a template) a tick colour turns tick marks on and a minor grid
    # colour draws a minor grid: the bare figure keeps both off, as the theme drew it (One
    # query's bars were pixel-identical to the themed ones at 1920 and 1280 in Chromium).
    bars = go.Figure(go.Bar(x=[1, 2], y=[3, 4]))
    bars.update_xaxes(tickvals=[1, 2], ticktext=["a", "b"])
    bars.update_yaxes(title_text="weight")
    out = for_browser(bars).to_dict()
    assert "template" not in out["layout"] and out["data"][0]["type"] == "bar"
    for side in ("xaxis", "yaxis"):
        assert out["layout"][side]["ticks"] == "" and "minor" not in out["layout"][side]
    assert out["layout"]["xaxis"]["ticktext"] == ["a", "b"]
    assert out["layout"]["yaxis"]["title"]["text"] == "weight"


def test_other_figures_keep_their_theme() -> None:
    mixed = Spec(go.Figure([go.Heatmap(z=[[1.0]]), go.Scatter(x=[0], y=[0])]))
    assert for_browser(mixed) is mixed


def test_picture_axes_allow_label_overflow() -> None:
    x, y = Axis(TOKENS * 50, "key"), Axis(TOKENS * 50, "query")  # 600 positions: a picture
    fig = draw_map(_weights(0).repeat(50, 50), x, y, Colour(), Marks(), Frame("w"))
    assert fig.data[0].type == "image"
    assert fig.layout.xaxis.ticklabeloverflow == fig.layout.yaxis.ticklabeloverflow == "allow"
    shown = for_browser(fig).to_dict()
    assert "template" not in shown["layout"] and shown["data"][0]["source"].startswith("data:")


def test_many_bars_go_without_template_and_no_axis_measures_its_labels() -> None:
    """charts.bars' step outline (a scatter with its own colours) goes bare like the bars; a line
    that takes its colour from the template does not (test above). Every bare axis lets its
    labels overflow: plotly.js's default on a numeric axis measured each label after the draw."""
    from attnviz.views import charts

    values = np.linspace(0, 1, charts.MANY_BARS * 2)
    fig = charts.bars(values, [f"t{i}" for i in range(len(values))], highlight=5)
    out = for_browser(fig).to_dict()
    assert "template" not in out["layout"]
    assert [d["type"] for d in out["data"]] == ["scatter", "bar"]
    assert out["layout"]["xaxis"]["ticklabeloverflow"] == "allow"
    assert out["layout"]["yaxis"]["ticklabeloverflow"] == "allow"
    plain = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", fill="tozeroy"))
    assert for_browser(plain) is plain  # its fill colour would come from the template
