"""Long inputs and the researcher's views: colour scales, auto tick labels, token focus in the
overview, the lines view (attnviz/lines.py) and the rollout view, as figures and in the app."""

from __future__ import annotations

import json

import numpy as np
import plotly.io as pio
import pytest
import torch

from attnviz import StackConfig, rollout, trace_text
from attnviz.views import charts, images
from attnviz.views.colour import SCALES, colour_scale
from attnviz.views.lines import (
    SVG_LINES,
    LinesLook,
    LinesPick,
    is_cjk,
    lines_figure,
    select_lines,
)
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from tests.apphelpers import app, decode, heatmap_specs, image_pixels, specs

LONG_TEXT = " ".join(f"w{i}" for i in range(200))


def spread_weights(n: int = 300, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(2, n, n, generator=g), -1)  # [head, q, k]


# colour scales ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", SCALES)
def test_colour_scales_keep_true_values_and_say_their_range(mode: str) -> None:
    w = spread_weights()[0]  # [q, k] every weight near 1/300
    found = colour_scale(w, mode)
    top = float(w.max())
    assert found["zmin"] == 0.0
    assert found["zmax"] == pytest.approx(1.0 if mode == "fixed" else top)
    stops = found["colorscale"]
    if isinstance(stops, list):
        positions = [p for p, _ in stops]
        assert positions[0] == 0.0 and positions[-1] == 1.0
        assert all(a < b for a, b in zip(positions, positions[1:], strict=False))


def test_power_and_log_stops_follow_their_definitions() -> None:
    # colour(w) = Blues((w/max)^0.5) and Blues(1 + log10(w/max)/3): a stop at value position p
    # carries exactly that shade, so a thin weight gets a darker colour than on a linear ramp.
    from plotly.colors import sample_colorscale

    w = torch.tensor([[0.05, 1 / 300]])
    for mode, shade in (("power", lambda p: p**0.5), ("log", lambda p: 1 + np.log10(p) / 3)):
        stops = colour_scale(w, mode)["colorscale"]
        for p, colour in stops[1:]:
            assert colour == sample_colorscale("Blues", [float(shade(p))])[0]
        assert shade((1 / 300) / 0.05) > 0.25 > (1 / 300) / 0.05


def test_unknown_colour_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of"):
        colour_scale(torch.zeros(2, 2), "rainbow")


# heatmap labels --------------------------------------------------------------------------------


def test_auto_ticks_leave_label_spacing_to_the_browser_and_number_a_window() -> None:
    w = spread_weights(100)[0, 40:60, 40:60]  # [q, k] a window of positions 40..59
    tokens = [f"t{i}" for i in range(40, 60)]
    axis = Axis(tokens, start=40, ticks=None)
    fig = draw_map(w, axis, axis, Colour(bar="cb"), Marks(), Frame())
    spec = json.loads(pio.to_json(fig))
    for axis in ("xaxis", "yaxis"):
        assert spec["layout"][axis]["tickmode"] == "auto"
        assert "tickvals" not in spec["layout"][axis]
    assert spec["data"][0]["x"][0] == "40: t40" and spec["data"][0]["y"][-1] == "59: t59"
    assert spec["data"][0]["colorbar"]["title"]["text"] == "cb"


def test_bars_with_auto_ticks_number_their_categories() -> None:
    fig = charts.bars([0.5, 0.5], ["<b>", "x"], auto_ticks=True)
    spec = json.loads(pio.to_json(fig))
    assert spec["data"][0]["x"] == ["0: &lt;b&gt;", "1: x"]
    assert spec["layout"]["xaxis"]["tickmode"] == "auto"


# overview focus --------------------------------------------------------------------------------


def test_focus_mosaic_draws_one_bar_per_key_of_the_focused_row() -> None:
    w = torch.zeros(1, 2, 4, 4)  # [layer, head, q, k]
    w[0, 0, 2] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # head 0, query 2: all on key 1
    w[0, 1, 2] = torch.tensor([0.25, 0.25, 0.25, 0.25])
    w[:, :, [0, 1, 3]] = 0.25
    fig = images.mosaic(w, images.Tiles(thumb=8, gap=2, focus=2))
    img = image_pixels(fig.data[0])  # [rows, cols, rgb]
    tile0 = img[2:10, 2:10]  # head 0: th = tw = 8 (4 keys x 2 pixels)
    background = (tile0 == 246).all(-1)  # [8, 8]
    assert background[:, [0, 1, 4, 5, 6, 7]].all()  # keys 0, 2, 3 have no bar
    assert not background[:, [2, 3]].any()  # key 1: a full-height bar
    tile1 = img[2:10, 12:20]  # head 1: uniform row, every bar full height (scaled to its max)
    assert not (tile1 == 246).all(-1).any()
    with pytest.raises(ValueError, match="focus=4"):
        images.mosaic(w, images.Tiles(focus=4))


def test_gamma_brightens_thin_weights_in_the_mosaic() -> None:
    w = spread_weights(64).unsqueeze(0)  # [layer, head, q, k]
    lin = image_pixels(images.mosaic(w).data[0]).astype(float)
    pw = image_pixels(images.mosaic(w, images.Tiles(gamma=0.5)).data[0]).astype(float)
    assert pw.mean() < lin.mean()  # darker blues on average: thin weights show


# lines view ------------------------------------------------------------------------------------


def test_select_lines_keeps_exactly_the_pairs_above_the_threshold() -> None:
    w = spread_weights(50)
    picked = select_lines(w, LinesPick((0, 1), 0.03))
    for head, q, k, v in picked:
        want = (w[head] >= 0.03).nonzero()
        assert len(q) == len(want)
        assert np.allclose(v, w[head, q, k].numpy())
    one = select_lines(w, LinesPick((1,), 0.0, ("q", 7)))
    assert (one[0][1] == 7).all() and len(one[0][1]) == 50
    top = select_lines(w, LinesPick((0,)), max_lines=10)
    assert len(top[0][3]) == 10 and top[0][3].min() >= torch.topk(w[0].flatten(), 10).values[-1]


def test_masked_pairs_are_never_drawn() -> None:
    trace = trace_text(LONG_TEXT, StackConfig(d_model=32, n_heads=4, causal=True, seed=0))
    lt = trace.layers[0]
    for _, q, k, _ in select_lines(lt.weights, LinesPick(tuple(range(4))), lt.mask):
        assert (k <= q).all()  # causal: no line to a later key


def test_lines_figure_is_svg_escaped_and_counts_its_lines() -> None:
    w = spread_weights(300)
    tokens = ["<b>bold</b>"] + [f"t{i}" for i in range(299)]
    fig = lines_figure(w, (tokens, tokens), None, LinesPick((0, 1), 0.01, ("q", 0)))
    lines = [t for t in fig.data if t.mode == "lines" and t.showlegend is False]
    assert lines and {t.type for t in lines} == {"scatter"}  # SVG: no software WebGL
    assert {t.legendgroup for t in lines} == {"0", "1"}
    legend = [t.name for t in fig.data if t.mode == "lines" and t.showlegend is not False]
    assert legend == ["head 0", "head 1"]
    expected = int((w[:, 0] >= 0.01).sum())
    assert fig.layout.meta["lines"] == expected == sum(int(np.isnan(t.x).sum()) for t in lines)
    markers = [t for t in fig.data if t.mode != "lines"]
    assert len(markers) == 2 and len(markers[0].x) == 300
    assert {t.type for t in markers} == {"scatter"}
    assert "<b>bold" not in json.dumps([list(m.customdata[0]) for m in markers])
    assert markers[0].customdata[0][2] == "&lt;b&gt;bold&lt;/b&gt;"


def test_lines_figure_past_svg_lines_is_webgl() -> None:
    w = spread_weights(300)
    tokens = [f"t{i}" for i in range(300)]
    fig = lines_figure(w, (tokens, tokens), None, LinesPick((0, 1), 0.0))
    assert fig.layout.meta["lines"] > SVG_LINES
    lines = [t for t in fig.data if t.mode == "lines"]
    assert {t.type for t in lines} == {"scattergl"}
    assert (
        sum(int(np.isnan(t.x).sum()) for t in lines if t.showlegend is False)
        == (fig.layout.meta["lines"])
    )


def test_lines_figure_for_cross_attention_and_two_rows() -> None:
    trace = trace_text("the cat sat", StackConfig(d_model=16, n_heads=2), text_pair="it was a dog")
    lt = trace.layers[0]
    tokens = (trace.tokens, trace.key_tokens)
    fig = lines_figure(lt.weights, tokens, None, LinesPick((0,)), LinesLook(rows=True))
    q_marks, k_marks = [t for t in fig.data if t.mode == "markers+text"]
    assert len(q_marks.x) == len(trace.tokens) and len(k_marks.x) == len(trace.key_tokens)
    assert set(q_marks.y) == {1.0} and set(k_marks.y) == {0.0}  # queries on top, keys below
    with pytest.raises(ValueError, match="at least one head"):
        lines_figure(lt.weights, tokens, None, LinesPick(()))


def test_cjk_text_is_detected() -> None:
    assert is_cjk(["[CLS]", "我", "爱", "水", "课", "[SEP]"])
    assert not is_cjk(["[CLS]", "the", "cat", "[SEP]"])


# in the app ------------------------------------------------------------------------------------


def test_lines_view_on_the_playground_draws_and_focuses() -> None:
    at = app(query={"view": "lines", "layers": "2", "lines_w": "0.0"})
    assert not at.exception, at.exception
    spec = specs(at)[0]
    assert any(d["type"] == "scatter" and d["mode"] == "lines" for d in spec["data"])  # SVG lines
    everything = spec["layout"]["meta"]["lines"]
    at.selectbox(key="lines_focus").set_value("q3").run()
    assert not at.exception
    assert 0 < specs(at)[0]["layout"]["meta"]["lines"] < everything


def test_lines_view_with_two_sentences_on_the_playground() -> None:
    at = app(query={"view": "lines", "pair": "It was very tired."})
    assert not at.exception, at.exception
    q_marks, k_marks = [d for d in specs(at)[0]["data"] if d["mode"] == "markers+text"]
    assert len(decode(q_marks["x"])) != len(decode(k_marks["x"]))


def test_rollout_view_matches_the_engine_and_refuses_cross_attention() -> None:
    at = app(query={"view": "rollout", "layers": "3", "layer": "2"})
    assert not at.exception, at.exception
    (spec,) = heatmap_specs(at)
    from attnviz.ui.sidebar import DEFAULT_TEXT

    want = rollout(trace_text(DEFAULT_TEXT, StackConfig(d_model=64, n_heads=4, n_layers=3)))[2]
    assert np.allclose(decode(spec["data"][0]["z"]), want.numpy(), atol=1e-6)
    at = app(query={"view": "rollout", "pair": "It was very tired."})
    assert not at.exception
    assert any("second sentence" in str(i.value) for i in at.get("info"))


def test_detail_at_long_n_has_a_token_window_and_a_stated_colour_scale() -> None:
    at = app(query={"view": "detail", "text": LONG_TEXT})
    assert not at.exception, at.exception
    weights = heatmap_specs(at)[0]  # long layout: the weights come first, across the page
    assert "log10" in weights["data"][0]["colorbar"]["title"]["text"]
    at.slider(key="window").set_value((10, 29)).run()
    assert not at.exception
    weights = heatmap_specs(at)[0]
    assert decode(weights["data"][0]["z"]).shape == (20, 20)
    assert weights["data"][0]["y"][0].startswith("10: ")


def test_heads_view_focus_outlines_the_row_in_every_head() -> None:
    at = app(query={"view": "heads", "focus": "4"})
    assert not at.exception, at.exception
    maps = heatmap_specs(at)
    assert len(maps) == 4
    for spec in maps:
        (shape,) = spec["layout"]["shapes"]
        assert shape["y0"] == 3.5 and shape["y1"] == 4.5


def test_heads_view_past_page_cells_is_one_chart_of_pictures_and_two_numbers() -> None:
    # 4 heads of 300 x 300 are past maps.PAGE_CELLS: pictures, all in one chart (one plotly chart
    # to set up in the browser, not four), each head on its own square axes with its title, and
    # the focus row outlined in every head; the saturation dials are two st.metric, not charts.
    text = " ".join(f"w{i}" for i in range(300))
    at = app(query={"view": "heads", "text": text, "focus": "4"})
    assert not at.exception, at.exception
    (fig,) = specs(at)
    assert [d["type"] for d in fig["data"]] == ["image"] * 4
    layout = fig["layout"]
    axes = [(d["xaxis"], d["yaxis"]) for d in fig["data"]]
    assert axes == [("x", "y"), ("x2", "y2"), ("x3", "y3"), ("x4", "y4")]
    for x, y in axes:
        assert layout["yaxis" + y[1:]]["scaleanchor"] == x  # square cells
        assert layout["yaxis" + y[1:]]["ticktext"][0] == "0: w0"
    x1, x2 = layout["xaxis"]["domain"], layout["xaxis2"]["domain"]
    assert x1[1] <= x2[0]  # two columns, side by side
    assert layout["yaxis3"]["domain"][1] < layout["yaxis"]["domain"][0]  # a second row below
    titles = [a["text"] for a in layout["annotations"]]
    assert titles == ["head 0", "head 1", "head 2", "head 3"]
    rows = {(s["xref"], s["yref"], s["y0"], s["y1"]) for s in layout["shapes"]}
    assert rows == {(x, y, 3.5, 4.5) for x, y in axes}
    top, entropy = (float(m.value) for m in at.metric)
    assert 0 < top < 1 and 0 < entropy <= 1


# One query at a long input ---------------------------------------------------------------------


def test_many_bars_are_one_stepped_outline_with_the_highlight_drawn_over_it() -> None:
    """charts.bars past MANY_BARS: one filled step path (not a path per bar), hover per
    position, the highlighted position as the one bar, no legend for the two traces."""
    values = np.linspace(0.0, 1.0, charts.MANY_BARS + 1)
    labels = [f"<t{i}>" for i in range(len(values))]
    spec = json.loads(pio.to_json(charts.bars(values, labels, highlight=3)))
    outline, bar = spec["data"]
    assert outline["type"] == "scatter" and outline["line"]["shape"] == "hvh"
    assert outline["fill"] == "tozeroy"
    np.testing.assert_allclose(decode(outline["y"]), values)
    assert outline["customdata"][5] == "&lt;t5&gt;"  # hover reads each position, escaped
    assert bar["type"] == "bar" and bar["x"] == [3] and decode(bar["y"]) == [values[3]]
    assert spec["layout"]["showlegend"] is False
    named = json.loads(pio.to_json(charts.bars(values, labels, highlight=3, auto_ticks=True)))
    assert named["data"][1]["x"] == ["3: &lt;t3&gt;"]  # Rollout's categories: still at 3
    assert named["data"][0]["x"][:2] == ["0: &lt;t0&gt;", "1: &lt;t1&gt;"]
    few = json.loads(pio.to_json(charts.bars(values[:4], labels[:4], highlight=3)))
    assert [d["type"] for d in few["data"]] == ["bar"]  # a sentence keeps a bar per token


def test_one_query_at_a_long_input_tables_the_top_keys_and_offers_every_key() -> None:
    at = app(query={"view": "query", "text": LONG_TEXT, "query": "7"})
    assert not at.exception, at.exception
    (shown,) = at.table
    top = shown.value
    bar = next(s for s in specs(at) if s["data"][0]["customdata"] is not None)
    weights = decode(bar["data"][0]["y"])  # every key's weight, in the bars
    assert len(weights) == len(LONG_TEXT.split()) and len(top) == 16
    want = np.sort(weights)[::-1][:16]  # largest first; the table prints 4 decimals
    np.testing.assert_allclose(top["softmax"].to_numpy(dtype=float), want, atol=5e-5)
    assert set(top["allowed (not masked)"]) == {"✓"}
    (csv,) = [b for b in at.get("download_button") if "CSV" in b.label]
    assert "200" in csv.label
