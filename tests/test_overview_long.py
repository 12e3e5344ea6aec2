"""A long input's overview: the chosen head as a compact image; a head change keeps the mosaic.

At 512 tokens the overview sent three n x n heatmaps of numbers under the mosaic on every head
change (3.3 MB on the wire), and the mosaic's colour scale flipped on the first head change, so the
mosaic was sent again too (bench/load.py; a head change should send at most 150 KB).
"""

from __future__ import annotations

import base64
import io

import numpy as np
import torch
from PIL import Image

from attnviz.i18n import translate
from attnviz.views.maps import Axis, Colour, Marks, draw_map
from tests.apphelpers import app, specs

LONG_TEXT = " ".join(["the cat sat on the mat near the river while a dog slept"] * 12)  # ~145


def _png(fig) -> Image.Image:
    uri = fig.data[0].source
    assert uri.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


def picture(w, x_tokens, y_tokens, gamma=1.0):
    """A weights map drawn as a picture (what draw_map does past a heatmap's size, or asked)."""
    return draw_map(w, Axis(x_tokens), Axis(y_tokens), Colour(gamma=gamma), Marks(values=False))


def test_weights_image_is_pooled_small_and_positioned() -> None:
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(512, 512) * 3, dim=-1)  # [q, k] a noisy, hard-to-compress head
    tokens = [f"t{i}" for i in range(512)]
    fig = picture(w, tokens, tokens, gamma=0.25)
    img = _png(fig)
    assert img.size == (256, 256) and img.mode == "P"  # pooled 2 x 2, a palette image
    assert len(fig.data[0].source) < 150_000
    image = fig.data[0]
    assert image.dx == image.dy == 2.0 and image.x0 == image.y0 == 0.5  # pixel i covers 2i, 2i+1
    assert list(fig.layout.xaxis.range) == [-0.5, 511.5]
    assert fig.layout.xaxis.ticktext[1].endswith(": t16")  # every 16th of 512 at 32 ticks
    # the brightest pixel is where the pooled weights are largest
    pooled = torch.nn.functional.adaptive_avg_pool2d(w[None, None], (256, 256))[0, 0]
    rgb = torch.from_numpy(np.asarray(img.convert("RGB")).astype("int64")).sum(-1)  # [256, 256]
    assert rgb.argmin() == pooled.argmax()  # Blues: the darkest colour is the largest weight


def test_short_inputs_are_drawn_at_one_pixel_per_token() -> None:
    w = torch.softmax(torch.randn(10, 12), dim=-1)
    fig = picture(w, list("abcdefghijkl"), list("abcdefghij"))
    assert _png(fig).size == (12, 10) and fig.data[0].dx == 1.0 and fig.data[0].x0 == 0.0


def test_long_overview_sends_an_image_and_keeps_the_mosaic_on_a_head_change() -> None:
    at = app("app_pages/pretrained.py")
    at.text_area(key="text").set_value(LONG_TEXT).run()
    drawn = {c.proto.id.rsplit("-", 1)[-1]: c.proto.spec for c in at.get("plotly_chart")}
    assert "overview_head" in drawn and not any(k.startswith("detail_") for k in drawn)
    assert len(drawn["overview_head"]) < 150_000
    title = translate("en", "ex.overview_head_title", l=0, h=0)
    assert title in drawn["overview_head"]
    at.slider(key="head").set_value(5).run()
    after = {c.proto.id.rsplit("-", 1)[-1]: c.proto.spec for c in at.get("plotly_chart")}
    assert after["mosaic"] == drawn["mosaic"]  # same picture: the browser keeps it
    assert translate("en", "ex.overview_head_title", l=0, h=5) in after["overview_head"]
    # the button opens the same head in Head detail, with every weight as a number
    at.button(key="overview_open").click().run()
    assert at.segmented_control(key="view").value == "detail"
    assert {"detail_scores", "detail_logits", "detail_weights"} <= {
        c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")
    }
    assert at.slider(key="head").value == 5


def test_short_overview_keeps_the_three_maps() -> None:
    at = app("app_pages/pretrained.py")
    keys = {c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")}
    assert {"mosaic", "detail_scores", "detail_logits", "detail_weights"} <= keys
    assert specs(at)


def test_projector_mode_does_not_grow_a_cached_figure_on_every_rerun() -> None:
    """chart() enlarges a copy: the overview's mosaic is cached per trace, and enlarging it in
    place grew its fonts again on every rerun of a projector session."""
    import json

    at = app("app_pages/pretrained.py", query={"projector": "true"})

    def mosaic_fonts() -> str:
        spec = next(c.proto.spec for c in at.get("plotly_chart") if c.proto.id.endswith("mosaic"))
        layout = json.loads(spec)["layout"]
        return json.dumps([layout["font"], layout["xaxis"].get("tickfont")])

    first = mosaic_fonts()
    for head in (1, 2, 3):
        at.slider(key="head").set_value(head).run()
    assert mosaic_fonts() == first


def test_heatmap_ticks_that_skip_tokens_say_their_positions() -> None:
    """Past max_ticks tokens a heatmap labels every k-th one as "position: token" (a repeated word
    at 4,096 tokens says nothing on its own); short inputs keep the bare tokens."""

    def vectors(matrix, tokens):
        x = Axis.dims(matrix.shape[-1], ticks=16)
        return draw_map(matrix, x, Axis(tokens, ticks=16), Colour.diverging("v"), Marks())

    long = vectors(torch.zeros(100, 4), ["the"] * 100)
    assert list(long.layout.yaxis.ticktext[:3]) == ["0: the", "7: the", "14: the"]
    assert list(long.layout.yaxis.tickvals) == list(long.layout.yaxis.ticktext)
    dims = vectors(torch.zeros(3, 100), ["a", "b", "c"])
    assert list(dims.layout.xaxis.ticktext[:3]) == ["0", "7", "14"]  # a dimension is its number
    short = vectors(torch.zeros(5, 4), ["a", "<b>", "c", "d", "e"])
    assert list(short.layout.yaxis.ticktext) == ["a", "&lt;b&gt;", "c", "d", "e"]
    assert list(short.layout.xaxis.ticktext) == ["0", "1", "2", "3"]
