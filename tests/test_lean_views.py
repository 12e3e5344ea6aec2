"""The views of a lean trace (long input) show the same numbers as a full trace of the same run:
statistics, the overview with a focus token, one head's image, a Head detail window, one query's
bars and the link grid; and rollout is refused with its size where the budget does not allow it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.measures.stats import head_stats
from attnviz.views import maps, panels
from attnviz.views.selection import Selection
from tests.apphelpers import decode
from tests.test_lean import _build, set_full_bytes, words


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(lean trace, full trace) of one 300-token input through a tiny GQA Llama."""
    from transformers import AutoTokenizer

    from attnviz.engine.hooked import resolve, trace_model

    tok = AutoTokenizer.from_pretrained(resolve(None)[0])
    tok.model_max_length = 16_384
    model, _ = _build("llama", tmp_path_factory.mktemp("views"), tok)
    mp = pytest.MonkeyPatch()
    set_full_bytes(mp, 1)
    lean = trace_model(model, words(300), mask_tokens=[5])
    set_full_bytes(mp, 2**40)
    full = trace_model(model, words(300), mask_tokens=[5])
    set_full_bytes(mp, None)
    mp.undo()
    assert lean.meta["lean"] and not full.meta["lean"]
    return lean, full


def test_head_statistics_of_a_lean_trace_equal_the_full_ones(pair) -> None:
    lean, full = pair
    got, want = head_stats(lean), head_stats(full)
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=2e-5, rtol=1e-5, msg=name)


def _data(fig) -> list:
    return [decode(t) if isinstance(t, dict) else t for t in fig.to_plotly_json()["data"]]


@pytest.mark.parametrize("focus", [None, 0, 150, 299])
def test_overview_of_a_lean_trace_is_the_full_ones(pair, focus) -> None:
    lean, full = pair
    sel = Selection(focus=focus)
    a, b = panels.overview_figure(lean, sel), panels.overview_figure(full, sel)
    assert a.to_plotly_json()["data"][0]["source"] == b.to_plotly_json()["data"][0]["source"]


def test_head_image_window_query_and_link_views_agree(pair) -> None:
    lean, full = pair
    sel = Selection(layer=1, head=3, query=200, key=5, window=(100, 164), shared=True)
    a, b = panels.head_image_figure(lean, sel), panels.head_image_figure(full, sel)
    assert a.to_plotly_json()["data"][0]["source"] == b.to_plotly_json()["data"][0]["source"]
    for fa, fb in zip(
        panels.detail_figures(lean, sel), panels.detail_figures(full, sel), strict=True
    ):
        za, zb = fa.data[0].z, fb.data[0].z
        assert za.shape == zb.shape == (64, 64)
        assert torch.allclose(torch.as_tensor(za), torch.as_tensor(zb), atol=1e-5, equal_nan=True)
    bars_a, bars_b = panels.query_figures(lean, sel)[0], panels.query_figures(full, sel)[0]
    assert torch.allclose(torch.as_tensor(bars_a.data[0].y), torch.as_tensor(bars_b.data[0].y))
    link_a, link_b = panels.link_figure(lean, sel), panels.link_figure(full, sel)
    # key 5 is hidden in every head: each cell is masked (empty, "–"), not a weight of 0
    assert torch.isnan(torch.as_tensor(link_a.data[0].z)).all()
    assert [t.text for t in link_a.data[1:]] == [("–",) * link_a.data[0].z.size]
    assert torch.allclose(
        torch.as_tensor(link_a.data[0].z), torch.as_tensor(link_b.data[0].z), equal_nan=True
    )
    from attnviz.measures.stats import heads_linking

    ranked, want = heads_linking(lean, 200, 150, top=5), heads_linking(full, 200, 150, top=5)
    assert [r[:2] for r in ranked] == [r[:2] for r in want]
    assert all(abs(a[2] - b[2]) < 1e-5 for a, b in zip(ranked, want, strict=True))
    from attnviz.measures.links import default_link
    from attnviz.measures.stats import weight_shift

    assert default_link(lean) == default_link(full)
    # the what-if's shift: a lean pair against the full pair of the same two traces
    torch.testing.assert_close(weight_shift(lean, full), torch.zeros(2, 4), atol=1e-5, rtol=0)
    heads = panels.heads_figures(lean, Selection(layer=0))
    assert len(heads) == lean.n_heads and heads[0].data[0].type == "image"


def test_rollout_is_refused_with_its_size_where_the_budget_does_not_allow_it(pair, monkeypatch):
    lean, _ = pair
    assert panels.rollout_figures(lean, Selection(query=3))  # 300 tokens: fits
    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_BYTES", str(2**20))
    import attnviz.engine.budget as budget_module

    budget_module.budget.cache_clear()
    try:
        with pytest.raises(
            ValueError, match=r"rollout multiplies 2 layers of 302 x 302.*about 147 tokens"
        ):
            panels.rollout_figures(lean, Selection(query=3))
    finally:
        monkeypatch.delenv("ATTNVIZ_MAX_TRACE_BYTES")
        budget_module.budget.cache_clear()


def _pixels(uri: str) -> torch.Tensor:
    import base64
    import io

    from PIL import Image

    raw = base64.b64decode(uri.split(",", 1)[1])
    return torch.as_tensor(np.array(Image.open(io.BytesIO(raw)).convert("RGB")))


def test_a_wide_window_draws_scores_and_logits_as_pictures_and_keeps_the_weights(pair) -> None:
    """Past PICTURE_SIDE positions a side, scores and logits go as PNGs (the same for lean and
    full), the weights stay numbers; a 256 window keeps numbers in all three."""
    lean, full = pair
    sel = Selection(layer=1, head=2, window=(10, 10 + maps.PICTURE_SIDE + 1))
    a, b = panels.detail_figures(lean, sel), panels.detail_figures(full, sel)
    for fa, fb in zip(a[:2], b[:2], strict=True):
        assert fa.data[0].type == "image" and fa.data[0].x0 == 10
        pa, pb = _pixels(fa.data[0].source), _pixels(fb.data[0].source)
        assert pa.shape == pb.shape == (257, 257, 3)
        # q·k recomputed vs HF eager's stored scores: a cell may sit on a colour level's edge
        assert (pa != pb).any(-1).float().mean() < 1e-3
        # the colour bar: the pixels' scale, from -bound to +bound, on a cell nobody sees
        bar = fa.data[1]
        assert bar.type == "heatmap" and bar.showscale and bar.opacity == 0
        assert bar.zmin == -bar.zmax > -float("inf") and bar.zmax > 0
        assert bar.hoverinfo == "skip"
    assert a[2].data[0].type == "heatmap" and a[2].data[0].z.shape == (257, 257)
    torch.testing.assert_close(
        torch.as_tensor(a[2].data[0].z), torch.as_tensor(b[2].data[0].z), atol=1e-5, rtol=0,
        equal_nan=True,
    )  # fmt: skip
    narrow = Selection(layer=1, head=2, window=(10, 10 + maps.PICTURE_SIDE))
    assert all(f.data[0].type == "heatmap" for f in panels.detail_figures(lean, narrow))


def test_the_budgets_refusals_speak_the_pages_language(monkeypatch) -> None:
    """The engine refuses in English (its callers read str(err)); the page shows the Message in
    its own language (attnviz.ui.language.said)."""
    import attnviz.engine.budget as budget_module
    from attnviz.i18n import Message

    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_BYTES", str(2**20))
    budget_module.budget.cache_clear()
    try:
        with pytest.raises(ValueError) as refused:
            budget_module.check_rollout(4, 8, 4096)
    finally:
        monkeypatch.delenv("ATTNVIZ_MAX_TRACE_BYTES")
        budget_module.budget.cache_clear()
    msg = refused.value.args[0]
    assert isinstance(msg, Message) and str(refused.value).startswith("rollout multiplies 4 layers")
    zh = msg.in_language("zh")
    assert "本服务器允许 1.0 MiB" in zh and "4,096 × 4,096" in zh and "rollout multiplies" not in zh


def test_a_signed_picture_has_the_colour_bar_of_its_pixels() -> None:
    """The bar runs from -bound to +bound in the colours the pixels get: a cell at +bound is the
    bar's top colour, at -bound its bottom one, 0 its middle; beyond the bound it is clamped."""
    from attnviz.views.maps import Axis, Colour, Marks, draw_map

    m = torch.tensor([[2.0, -2.0, 0.0, 9.0]])
    fig = draw_map(
        m, Axis(list("abcd")), Axis(["q"]), Colour.diverging("v", 2.0), Marks(values=False)
    )
    bar = fig.data[1]
    assert (bar.zmin, bar.zmax) == (-2.0, 2.0) and bar.showscale
    px = _pixels(fig.data[0].source)[0]  # [k, rgb]

    def rgb(colour: str) -> tuple[int, ...]:
        return tuple(int(v) for v in colour.strip("rgb()").split(","))

    def near(pixel: torch.Tensor, colour: str, within: int = 1) -> bool:  # the LUT truncates
        return max(abs(a - b) for a, b in zip(pixel.tolist(), rgb(colour), strict=True)) <= within

    scale = bar.colorscale
    assert near(px[0], scale[-1][1])  # +bound: the top
    assert near(px[1], scale[0][1])  # -bound: the bottom
    assert near(px[3], scale[-1][1])  # clamped
    (middle,) = [c for at, c in scale if at == 0.5]
    assert near(px[2], middle, within=3)
