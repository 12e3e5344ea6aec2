"""attnviz.views.maps.draw_map: one place picks numbers, a heatmap or a picture for a map, by its
cells; the option objects say what it shows."""

from __future__ import annotations

import torch

from attnviz.views import maps
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map


def kind(fig) -> str:
    types = [t.type for t in fig.data]
    if types[0] == "image":
        return "picture"
    return "numbers" if getattr(fig.data[0], "text", None) is not None else "heatmap"


def square(n: int) -> tuple:
    tokens = [f"t{i}" for i in range(n)]
    return torch.softmax(torch.randn(n, n), -1), Axis(tokens), Axis(tokens)


def test_cells_decide_numbers_heatmap_or_picture() -> None:
    w, x, y = square(20)  # 400 cells: numbers when asked, else a heatmap
    assert kind(draw_map(w, x, y, Colour(), Marks(numbers=True))) == "numbers"
    assert kind(draw_map(w, x, y, Colour(), Marks())) == "heatmap"
    w, x, y = square(21)  # 441 cells: too many to print
    assert kind(draw_map(w, x, y, Colour(), Marks(numbers=True))) == "heatmap"
    side = int(maps.SIGNED_HEATMAP_CELLS**0.5)  # a signed map goes as a picture sooner
    s, x, y = square(side)
    assert kind(draw_map(s, x, y, Colour.diverging("q·k"), Marks())) == "heatmap"
    s, x, y = square(side + 1)
    assert kind(draw_map(s, x, y, Colour.diverging("q·k"), Marks())) == "picture"
    assert kind(draw_map(s, x, y, Colour(), Marks())) == "heatmap"  # weights keep their numbers
    thin = torch.randn(maps.HEATMAP_CELLS // 64, 64)  # [keys, d_head]: one query's products
    dims, keys = Axis.dims(64), Axis([str(i) for i in range(thin.shape[0])])
    assert kind(draw_map(thin, dims, keys, Colour.diverging("v"), Marks())) == "heatmap"


def test_a_pooled_map_or_one_without_values_is_a_picture_with_its_note() -> None:
    w, x, y = square(300)
    pooled = torch.nn.functional.adaptive_avg_pool2d(w[None, None], (100, 100))[0, 0]
    fig = draw_map(pooled, x, y, Colour(), Marks(), Frame("head", 400, " (colour only)"))
    assert kind(fig) == "picture" and fig.layout.title.text == "head (colour only)"
    assert fig.data[0].dx == 3.0  # a pixel covers three positions
    small, x, y = square(10)
    assert kind(draw_map(small, x, y, Colour(), Marks(values=False))) == "picture"
    assert maps.positions_per_pixel(512) == 2 and maps.positions_per_pixel(100) == 1


def test_masked_logits_are_blank_cells_and_printed_as_minus_infinity() -> None:
    z = torch.tensor([[1.0, float("-inf")], [0.5, -0.5]])
    fig = draw_map(z, Axis(["a", "b"]), Axis(["c", "d"]), Colour.diverging("logit"),
                   Marks(numbers=True))  # fmt: skip
    assert fig.data[0].text[0][1] == "" and list(fig.data[1].text) == ["−∞"]
    assert (fig.data[0].zmin, fig.data[0].zmax) == (-1.0, 1.0)  # the largest finite |value|
