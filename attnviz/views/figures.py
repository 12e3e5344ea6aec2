"""Plain data -> plotly figures. No streamlit here; every token label is HTML-escaped."""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import plotly.graph_objects as go
import plotly.io
import torch
from _plotly_utils.utils import convert_to_base64
from plotly.basedatatypes import BaseFigure
from plotly.colors import get_colorscale, sample_colorscale

from attnviz.views.frames import to_numpy

T = TypeVar("T")

# Every chart's modebar exports a PNG at twice the on-screen size.
PLOTLY_CONFIG = {
    "displaylogo": False,
    "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "attnviz"},
}
LINE_COLOURS = ["#2f6db3", "#e4572e", "#29a36a", "#9b59b6", "#f0a202", "#17becf"]
WEIGHTS_SCALE = "Blues"
SIGNED_SCALE = "RdBu_r"
FONT = dict(family="Inter, 'Noto Sans CJK SC', 'Source Han Sans SC', sans-serif", size=13)


def escape(tokens: Sequence[str]) -> list[str]:
    """Plotly renders some HTML in tick and hover text: show tokens as typed, never as markup."""
    return [html.escape(str(t), quote=False) for t in tokens]


class Spec(BaseFigure):
    """A figure already turned into the JSON values plotly.js reads, for a figure drawn again and
    again (the overview's mosaic on every head change, a head's three maps that thirty students
    open): st.plotly_chart takes it like a go.Figure, but skips plotly's deep copy and numpy
    encoding of every property on every rerun (~1.4 ms a heatmap at 32 tokens, with the GIL
    held). Read-only; `figure()` gives an editable go.Figure back."""

    def __init__(self, fig: go.Figure) -> None:  # noqa: D107 (BaseFigure's own __init__ is skipped)
        text = plotly.io.to_json(fig, validate=False)
        object.__setattr__(self, "_spec", json.loads(text))
        object.__setattr__(self, "nbytes", len(text))  # what it sends, roughly what it holds

    @classmethod
    def of(cls, data: list[dict], layout: dict) -> Spec:
        """What Spec(go.Figure(data=data, layout=layout)) holds, without the figure: building one
        and deep-copying it (with its theme template, 7 KB of JSON) cost more than encoding the
        dicts (~1.5 ms of a heatmap's ~2 ms at 34 tokens, GIL held; tests pin the equality)."""
        spec = _copy_tree({"data": data, "layout": layout})  # arrays are replaced, not changed
        convert_to_base64(spec)  # numeric arrays as typed arrays, as go.Figure.to_dict does
        text = plotly.io.json.to_json_plotly(spec)
        spec = json.loads(text)
        template = _template()
        if template is not None and "template" not in spec["layout"]:
            spec["layout"]["template"] = template[0]  # shared: nothing writes to a Spec
            text_bytes = len(text) + template[1]
        else:
            text_bytes = len(text)
        new = object.__new__(cls)
        object.__setattr__(new, "_spec", spec)
        object.__setattr__(new, "nbytes", text_bytes)
        return new

    def to_dict(self) -> dict:
        # New dicts for the traces: plotly.io.to_json pops each trace's "uid" in place.
        return {
            "data": [dict(trace) for trace in self._spec["data"]],
            "layout": self._spec["layout"],
        }

    def to_plotly_json(self) -> dict:
        return self.to_dict()

    def figure(self) -> go.Figure:
        return go.Figure(self.to_dict())

    def __repr__(self) -> str:
        return f"Spec({len(self._spec['data'])} traces, ~{self.nbytes} bytes)"


def _tick_step(n: int, room: int = 48) -> int:
    return max(1, -(-n // room))


def _layout(fig: go.Figure, title: str, height: int | None) -> go.Figure:
    fig.update_layout(**_layout_dict(title, height, {}))
    return fig


def heatmap(
    matrix: torch.Tensor | np.ndarray,
    x_tokens: Sequence[str],
    y_tokens: Sequence[str],
    *,
    title: str = "",
    value_name: str = "weight",
    colorscale: str = WEIGHTS_SCALE,
    zmin: float | None = None,
    zmax: float | None = None,
    signed: bool = False,
    highlight_row: int | None = None,
    highlight_col: int | None = None,
    show_values: bool = False,
    height: int | None = None,
    x_title: str = "key",
    y_title: str = "query",
    show_scale: bool = True,
    show_y_labels: bool = True,
    max_ticks: int = 48,
    auto_ticks: bool = False,
    start: tuple[int, int] = (0, 0),
    colorbar_title: str = "",
) -> go.Figure:
    """A query x key matrix with tokens on both axes (integer positions, so repeats stay apart).

    -inf (masked logits) shows as an empty cell. `signed` centres a diverging scale on 0.
    `auto_ticks` lets the browser label every k-th token from the axis' pixel length (one label per
    1.2 font heights, so none overlap; zooming in labels more), as "position: token";
    `start` (key, query) numbers a window of a longer input from its first position.
    """
    z = to_numpy(matrix).copy()  # [q, k]
    minus_inf = np.isneginf(z)  # [q, k] masked logits: drawn blank, labelled −∞ with the values
    z[~np.isfinite(z)] = np.nan
    n_q, n_k = z.shape
    xs, ys = escape(x_tokens), escape(y_tokens)
    # Categories numbered "i: token" keep repeated tokens apart and give hover its labels without
    # a per-cell array (which plotly deep-copies on every update: 50 ms for one 64x64 map).
    x_cat = [f"{j}: {tok}" for j, tok in enumerate(xs, start[0])]
    y_cat = [f"{i}: {tok}" for i, tok in enumerate(ys, start[1])]
    if signed:
        colorscale = SIGNED_SCALE if colorscale == WEIGHTS_SCALE else colorscale
        bound = float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0
        zmin, zmax = (-bound, bound) if zmin is None else (zmin, zmax)
    value = html.escape(value_name, quote=False)
    trace = dict(
        type="heatmap",
        z=z,
        x=x_cat,
        y=y_cat,
        colorscale=_named_scale(colorscale) if isinstance(colorscale, str) else colorscale,
        zmin=zmin,
        zmax=zmax,
        showscale=show_scale,
        colorbar=dict(
            thickness=10,
            xpad=4,
            title=dict(text=html.escape(colorbar_title), side="right", font=dict(size=11)),
        ),
        xgap=1 if n_k <= 40 else 0,
        ygap=1 if n_q <= 40 else 0,
        hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>{value} %{{z:.4f}}<extra></extra>",
    )
    if show_values and n_q * n_k <= 400:
        trace["text"] = np.vectorize(lambda v: "" if np.isnan(v) else f"{v:.2f}")(z)
        trace["texttemplate"] = "%{text}"
        trace["textfont"] = dict(size=11)
    data = [trace]
    if show_values and n_q * n_k <= 400 and minus_inf.any():
        # A text trace, not the heatmap's own text: plotly skips the text of empty (NaN) cells.
        qi, kj = np.nonzero(minus_inf)
        data.append(
            dict(
                type="scatter",
                mode="text",
                x=[x_cat[j] for j in kj],
                y=[y_cat[i] for i in qi],
                text=["−∞"] * len(qi),
                textfont=dict(size=11, color="#555"),
                hoverinfo="skip",
                showlegend=False,
            )
        )
    sx, sy = _tick_step(n_k, max_ticks), _tick_step(n_q, max_ticks)
    shapes = []
    if highlight_row is not None and 0 <= highlight_row < n_q:
        shapes.append(
            dict(
                type="rect",
                x0=-0.5,
                x1=n_k - 0.5,
                y0=highlight_row - 0.5,
                y1=highlight_row + 0.5,
                line=dict(color="#e4572e", width=3),
            )
        )
    if highlight_col is not None and 0 <= highlight_col < n_k:
        shapes.append(
            dict(
                type="rect",
                x0=highlight_col - 0.5,
                x1=highlight_col + 0.5,
                y0=-0.5,
                y1=n_q - 0.5,
                line=dict(color="#e4572e", width=2, dash="dot"),
            )
        )
    layout = dict(
        xaxis=dict(
            type="category",
            tickmode="array",
            tickvals=x_cat[::sx],
            ticktext=xs[::sx],
            tickangle=-90 if n_k > 6 else 0,
            side="bottom",
            title=dict(text=x_title, font=dict(size=12)),
            showgrid=False,
        ),
        yaxis=dict(
            type="category",
            tickmode="array",
            tickvals=y_cat[::sy],
            ticktext=ys[::sy],
            showticklabels=show_y_labels,
            autorange="reversed",
            title=dict(text=y_title if show_y_labels else "", font=dict(size=12)),
            showgrid=False,
        ),
        **({"shapes": shapes} if shapes else {}),
    )
    if auto_ticks:
        for axis in (layout["xaxis"], layout["yaxis"]):
            for name in ("tickvals", "ticktext"):
                del axis[name]
            axis["tickmode"] = "auto"
    return _figure(data, _layout_dict(title, height, layout))


def _figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain dicts, without plotly's property-by-property validation: that was half
    of building a mosaic or a head's heatmap (~10 ms of every new sentence with the GIL held, which
    a class of 30 waits for in turn). What these dicts hold is pinned by the tests, which build
    every figure with validation on (ATTNVIZ_VALIDATE_FIGURES=1, set in tests/conftest.py).
    Inside as_specs(), a Spec straight from the dicts."""
    if getattr(_as_specs, "on", False):
        if not _VALIDATE:
            return Spec.of(data, layout)  # type: ignore[return-value]
        return Spec(go.Figure(data=data, layout=layout))  # type: ignore[return-value]
    return go.Figure(data=data, layout=layout, _validate=_VALIDATE)


_as_specs = threading.local()


def as_specs(build: Callable[[], T]) -> T:
    """build(), with every figure it makes (through heatmap, mosaic, weights_image...) made as a
    Spec straight from its dicts: for figures the app keeps as ready JSON (the overview's
    mosaic, a head's three maps). Only for builders that return those figures untouched."""
    before = getattr(_as_specs, "on", False)
    _as_specs.on = True
    try:
        return build()
    finally:
        _as_specs.on = before


def _copy_tree(value):
    """Dicts and lists copied all the way down, without a dict's None values (go.Figure leaves an
    attribute set to None unset); everything else (arrays, strings) shared."""
    if isinstance(value, dict):
        return {k: _copy_tree(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_copy_tree(v) for v in value]
    return value


def _template() -> tuple[dict, int] | None:
    """The default plotly template (Streamlit's, once streamlit is imported) as go.Figure puts it
    in a figure's layout, and its JSON length; None when there is no default."""
    default = plotly.io.templates.default
    if default is None:
        return None
    return _template_of(default) if isinstance(default, str) else _template_json(default)


@functools.cache
def _template_of(name: str) -> tuple[dict, int]:
    return _template_json(plotly.io.templates[name])


def _template_json(template) -> tuple[dict, int]:
    text = plotly.io.to_json(go.Figure(layout=dict(template=template)), validate=False)
    found = json.loads(text)["layout"]["template"]
    return found, len(json.dumps(found, separators=(",", ":")))


@functools.cache
def _named_scale(name: str) -> list[list]:
    # What plotly's validation does to a named scale: plotly.js does not know plotly.py's names
    # ("RdBu_r" is plotly.py's reversal; its "Blues" is not plotly.js's), so send the colours.
    return [[float(at), colour] for at, colour in get_colorscale(name)]


_VALIDATE = os.environ.get("ATTNVIZ_VALIDATE_FIGURES", "0").strip() == "1"


TITLE_LINE_PX = 20  # one more line of a title (15 px font) above the plot


def _layout_dict(title: str, height: int | None, extra: dict) -> dict:
    # A "\n" in a title breaks its line: plotly never wraps one, and a title wider than a chart
    # in a third of a 1280 px page was cut off ("Size of the softmax gradient ‖diag(p) − p…").
    text = html.escape(title, quote=False).replace("\n", "<br>")
    return dict(
        title=dict(text=text, x=0, xanchor="left", font=dict(size=15)),
        margin=dict(l=10, r=10, t=40 + TITLE_LINE_PX * title.count("\n") if title else 10, b=10),
        font=FONT,
        height=height,
        plot_bgcolor="white",
        **extra,
    )


def diff_heatmap(
    new: torch.Tensor | np.ndarray,
    base: torch.Tensor | np.ndarray,
    x_tokens: Sequence[str],
    y_tokens: Sequence[str],
    *,
    title: str = "",
    bound: float | None = None,
    height: int | None = None,
    value_name: str = "Δ weight",
    **kwargs,
) -> go.Figure:
    """new − base on one symmetric colour scale (red: more weight than the baseline)."""
    d = to_numpy(new) - to_numpy(base)  # [q, k]
    b = bound if bound is not None else max(float(np.nanmax(np.abs(d))), 1e-6)
    return heatmap(
        d,
        x_tokens,
        y_tokens,
        title=title,
        value_name=value_name,
        signed=True,
        zmin=-b,
        zmax=b,
        height=height,
        **kwargs,
    )


# Colour levels of a mosaic: with white, the bars' grey and the silenced heads' X it stays a
# 256-colour palette PNG (one byte a pixel; see png_data_uri).
MOSAIC_LEVELS = 252


@functools.cache
def _colour_lut(colorscale: str, n: int = 256) -> np.ndarray:
    rgb = sample_colorscale(colorscale, list(np.linspace(0, 1, n)), colortype="tuple")
    return (np.array(rgb) * (255 if max(max(c) for c in rgb) <= 1 else 1)).astype(np.uint8)


def _coloured(norm: torch.Tensor, gamma: float) -> np.ndarray:
    """Weights scaled to 0..1 -> RGB uint8 [..., 3] in one of MOSAIC_LEVELS colours of the
    weights scale, by norm^gamma (the mosaic's thumbnails, its focus bars, a long head's image)."""
    lut = _colour_lut(WEIGHTS_SCALE, MOSAIC_LEVELS)
    return lut[(norm.clamp(0, 1) ** gamma * (MOSAIC_LEVELS - 1)).round().long().numpy()]


def mosaic(
    weights: torch.Tensor,
    *,
    thumb: int = 48,
    gap: int = 4,
    shared_scale: bool = False,
    selected: tuple[int, int] | None = None,
    title: str = "",
    height: int | None = None,
    focus: int | None = None,
    gamma: float = 1.0,
    marked: Sequence[tuple[int, int]] = (),
) -> go.Figure:
    """Every layer x head as a thumbnail in one RGB image (one go.Image: fast even at n = 512).

    `marked` heads (silenced ones) are crossed out with a dark grey X.

    weights: [layer, head, q, k]. Each thumbnail is average-pooled to at most `thumb` pixels a side
    and, unless `shared_scale`, scaled to its own maximum so faint heads still show their pattern;
    `gamma` < 1 colours by (w/max)^gamma so weights spread thin over a long row still show.
    `focus` (a query position) draws only that token's row in each thumbnail, as bars over the keys.
    """
    n_layers, n_heads, n_q, n_k = weights.shape
    flat = weights.reshape(n_layers * n_heads, 1, n_q, n_k).float()  # [L*H, 1, q, k]
    th, tw = _thumb_size(n_q, n_k, thumb)
    if focus is not None:
        return _focus_mosaic(
            weights, focus, th, tw, gap, shared_scale, gamma, selected, title, height, marked
        )
    # Long inputs are average-pooled down; short ones are blown up with nearest (crisp cells).
    if th >= n_q and tw >= n_k:
        pooled = flat.repeat_interleave(th // n_q, 2).repeat_interleave(tw // n_k, 3)[:, 0]
    else:
        pooled = torch.nn.functional.adaptive_avg_pool2d(flat, (th, tw))[:, 0]  # [L*H, th, tw]
    if shared_scale:
        norm = pooled / pooled.amax().clamp_min(1e-12)
    else:
        norm = pooled / pooled.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)
    tiles = _coloured(norm, gamma).reshape(n_layers, n_heads, th, tw, 3)  # [L, H, th, tw, rgb]
    return _mosaic_figure(tiles, gap, selected, title, height, marked)


def _focus_mosaic(
    weights, focus, th, tw, gap, shared_scale, gamma, selected, title, height, marked=()
):
    """One query's row in every head: a bar per key (max-pooled to tw columns, so peaks survive)."""
    n_layers, n_heads, n_q, n_k = weights.shape
    if not 0 <= focus < n_q:
        raise ValueError(f"focus={focus} must be a query position 0..{n_q - 1}")
    row = weights[:, :, focus, :].reshape(n_layers * n_heads, 1, n_k).float()  # [L*H, 1, k]
    if tw >= n_k:
        pooled = row.repeat_interleave(tw // n_k, 2)[:, 0]  # [L*H, tw]
    else:
        pooled = torch.nn.functional.adaptive_max_pool1d(row, tw)[:, 0]  # [L*H, tw]
    top = pooled.amax() if shared_scale else pooled.amax(dim=1, keepdim=True)
    norm = (pooled / top.clamp_min(1e-12)).clamp(0, 1)  # [L*H, tw] bar heights: linear
    colour = _coloured(norm, gamma)  # [L*H, tw, rgb]
    # a bar fills pixel row y of a column when it reaches above it (at least 1 px for any weight)
    bar = (norm * th).ceil().clamp(min=1) * (pooled > 0)  # [L*H, tw]
    ys = torch.arange(th, 0, -1).view(1, th, 1)  # [1, th, 1] height of each pixel row's top
    filled = (ys <= bar.unsqueeze(1)).numpy()  # [L*H, th, tw]
    tiles = np.where(filled[..., None], colour[:, None], np.uint8(246))  # [L*H, th, tw, rgb]
    tiles = tiles.reshape(n_layers, n_heads, th, tw, 3).astype(np.uint8)
    return _mosaic_figure(tiles, gap, selected, title, height, marked)


def _mosaic_figure(tiles, gap, selected, title, height, marked=()) -> go.Figure:
    n_layers, n_heads, th, tw, _ = tiles.shape
    cell_h, cell_w = th + gap, tw + gap
    img = np.full((n_layers * cell_h + gap, n_heads * cell_w + gap, 3), 255, dtype=np.uint8)
    for layer in range(n_layers):
        for head in range(n_heads):
            y0, x0 = gap + layer * cell_h, gap + head * cell_w
            img[y0 : y0 + th, x0 : x0 + tw] = tiles[layer, head]
    for layer, head in marked:
        if 0 <= layer < n_layers and 0 <= head < n_heads:
            y0, x0 = gap + layer * cell_h, gap + head * cell_w
            steps = np.arange(max(th, tw))
            ys = y0 + steps * th // max(th, tw)
            xs = x0 + steps * tw // max(th, tw)
            for dx in (0, 1):  # two pixels wide, so it shows on small thumbnails
                img[ys, np.minimum(xs + dx, x0 + tw - 1)] = 60
                img[ys, np.maximum(x0 + tw - 1 - (xs - x0) - dx, x0)] = 60
    if selected is not None:
        layer, head = selected
        y0, x0 = gap + layer * cell_h, gap + head * cell_w
        colour = np.array([228, 87, 46], dtype=np.uint8)
        for d in range(1, min(gap, 2) + 1):
            img[y0 - d, x0 - d : x0 + tw + d] = colour
            img[y0 + th + d - 1, x0 - d : x0 + tw + d] = colour
            img[y0 - d : y0 + th + d, x0 - d] = colour
            img[y0 - d : y0 + th + d, x0 + tw + d - 1] = colour
    # A compressed image, not the raw RGB array: plotly would send that as base64 JSON (~1.9 MB
    # at any n); as PNG it is tens of kilobytes and the browser decodes it.
    image = dict(type="image", source=png_data_uri(img), hoverinfo="skip")
    # One invisible marker per thumbnail: hovering names the head, clicking selects it.
    centres = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    markers = dict(
        type="scatter",
        x=[gap + h * cell_w + tw / 2 for _, h in centres],
        y=[gap + la * cell_h + th / 2 for la, _ in centres],
        mode="markers",
        marker=dict(size=max(12, min(th, tw)), symbol="square", color="rgba(0,0,0,0)"),
        customdata=centres,
        hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<extra></extra>",
        showlegend=False,
    )
    xaxis = dict(
        tickmode="array",
        tickvals=[gap + h * cell_w + tw / 2 for h in range(n_heads)],
        ticktext=[f"H{h}" for h in range(n_heads)],
        side="bottom",
        showgrid=False,
        zeroline=False,
        range=[-0.5, img.shape[1] - 0.5],
        constrain="domain",
    )
    yaxis = dict(
        tickmode="array",
        tickvals=[gap + layer * cell_h + th / 2 for layer in range(n_layers)],
        ticktext=[f"L{layer}" for layer in range(n_layers)],
        showgrid=False,
        zeroline=False,
        range=[img.shape[0] - 0.5, -0.5],  # image rows run downwards
        scaleanchor="x",
        constrain="domain",
    )
    if height is None:
        # Keep thumbnails near their pixel size: no tall empty band around a one-layer mosaic.
        height = min(900, max(180, int(img.shape[0] * 1.6) + 70))
    return _figure([image, markers], _layout_dict(title, height, dict(xaxis=xaxis, yaxis=yaxis)))


def weights_image(
    matrix: torch.Tensor,
    x_tokens: Sequence[str],
    y_tokens: Sequence[str],
    *,
    title: str = "",
    side: int = 256,
    gamma: float = 1.0,
    height: int | None = None,
    x_title: str = "key",
    y_title: str = "query",
    max_ticks: int = 32,
) -> go.Figure:
    """One head's weights [q, k] as a 256-colour PNG, average-pooled to at most `side` pixels a side
    and coloured like the overview's thumbnails ((w/max)^gamma). A preview for long inputs: at
    512 tokens tens of kilobytes on the wire, where the same map as a heatmap of numbers is ~1.5 MB
    (and three of them were sent on every head change of the overview). The axes count token
    positions: ticks name every k-th token, hover gives the positions under the pointer."""
    w = matrix.detach().float().cpu()  # [q, k]
    n_q, n_k = w.shape
    h_px, w_px = min(n_q, side), min(n_k, side)
    if (h_px, w_px) != (n_q, n_k):
        w = torch.nn.functional.adaptive_avg_pool2d(w[None, None], (h_px, w_px))[0, 0]
    img = _coloured(w / w.amax().clamp_min(1e-12), gamma)  # [h_px, w_px, rgb]
    dx, dy = n_k / w_px, n_q / h_px  # tokens per pixel
    image = dict(
        type="image",
        source=png_data_uri(img),
        x0=(dx - 1) / 2,  # pixel i is centred on the tokens it averages
        dx=dx,
        y0=(dy - 1) / 2,
        dy=dy,
        hovertemplate=f"{html.escape(y_title)} %{{y:.0f}}<br>"
        f"{html.escape(x_title)} %{{x:.0f}}<extra></extra>",
    )
    xs, ys = escape(x_tokens), escape(y_tokens)
    sx, sy = _tick_step(n_k, max_ticks), _tick_step(n_q, max_ticks)
    xaxis = dict(
        tickmode="array",
        tickvals=list(range(0, n_k, sx)),
        ticktext=[f"{j}: {xs[j]}" for j in range(0, n_k, sx)],
        tickangle=-90,
        side="bottom",
        showgrid=False,
        zeroline=False,
        range=[-0.5, n_k - 0.5],
        title=dict(text=x_title, font=dict(size=12)),
    )
    yaxis = dict(
        tickmode="array",
        tickvals=list(range(0, n_q, sy)),
        ticktext=[f"{i}: {ys[i]}" for i in range(0, n_q, sy)],
        showgrid=False,
        zeroline=False,
        range=[n_q - 0.5, -0.5],
        scaleanchor="x",
        constrain="domain",
        title=dict(text=y_title, font=dict(size=12)),
    )
    return _figure([image], _layout_dict(title, height, dict(xaxis=xaxis, yaxis=yaxis)))


def png_data_uri(img: np.ndarray) -> str:
    """An RGB uint8 image [h, w, 3] as a PNG data URI, lossless. An image of at most 256 colours
    (the mosaic: its weight levels, white, greys and the selection's orange) is written with a
    palette: one byte a pixel, ~50 KB for the 6 x 12 heads of BERT at 32 tokens. zlib level 1:
    ~5x faster than level 6 for ~10% more bytes (2 vs 9 ms at 32 tokens, 12 vs 47 ms at 510)."""
    from PIL import Image

    h, w, _ = img.shape
    flat = img.reshape(-1, 3).astype(np.uint32)  # [h*w, rgb]
    packed = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]  # [h*w]
    colours, index = _palette_index(packed)
    if len(colours) <= 256:
        im = Image.fromarray(index.reshape(h, w).astype(np.uint8))
        rgb = np.stack([(colours >> 16) & 255, (colours >> 8) & 255, colours & 255], axis=1)
        im.putpalette(rgb.astype(np.uint8).tobytes())
    else:
        im = Image.fromarray(np.ascontiguousarray(img, dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# The colours the mosaic and a long head's image are drawn in: the weights scale's levels, white,
# the focus bars' background, the crossed-out heads' grey and the selection's orange.
_KNOWN_EXTRA = ((255, 255, 255), (246, 246, 246), (60, 60, 60), (228, 87, 46))


@functools.cache
def _known_palette() -> tuple[np.ndarray, int, np.ndarray]:
    """The known colours packed as 0xRRGGBB (sorted), a modulus under which they all differ, and
    the table from (colour % modulus) to the colour's index: one gather instead of a sort."""
    rgb = np.concatenate([_colour_lut(WEIGHTS_SCALE, MOSAIC_LEVELS), np.array(_KNOWN_EXTRA)])
    rgb = rgb.astype(np.uint32)
    colours = np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2])
    modulus = next(
        m for m in range(len(colours), 1 << 20) if len(np.unique(colours % m)) == len(colours)
    )
    table = np.zeros(modulus, dtype=np.int64)
    table[colours % modulus] = np.arange(len(colours))
    return colours, modulus, table


def _palette_index(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct colours, each pixel's index into them) for packed 0xRRGGBB pixels: by the known
    palette when every pixel is in it (~4x faster than np.unique at 510 tokens), else np.unique."""
    colours, modulus, table = _known_palette()
    index = table[packed % modulus]
    if np.array_equal(colours[index], packed):
        return colours, index
    return np.unique(packed, return_inverse=True)


def _thumb_size(n_q: int, n_k: int, thumb: int) -> tuple[int, int]:
    def side(n: int) -> int:
        return n * max(1, thumb // n) if n <= thumb else thumb

    return side(n_q), side(n_k)


def bars(
    values: torch.Tensor | np.ndarray | Sequence[float],
    labels: Sequence[str],
    *,
    title: str = "",
    value_name: str = "weight",
    highlight: int | None = None,
    height: int | None = 280,
    auto_ticks: bool = False,
) -> go.Figure:
    """One bar per token (integer positions, escaped labels). `auto_ticks`: "position: token"
    categories, every k-th labelled by the browser from the pixels there are (as heatmap)."""
    v = to_numpy(torch.as_tensor(values)) if not isinstance(values, np.ndarray) else values
    labels = escape(labels)
    colours = ["#e4572e" if i == highlight else "#2f6db3" for i in range(len(labels))]
    fig = go.Figure(
        go.Bar(
            x=np.arange(len(labels)),
            y=v,
            marker_color=colours,
            customdata=labels,
            hovertemplate=f"%{{customdata}}<br>{html.escape(value_name)} %{{y:.4f}}<extra></extra>",
        )
    )
    step = _tick_step(len(labels))
    fig.update_xaxes(
        tickmode="array", tickvals=list(range(0, len(labels), step)), ticktext=labels[::step]
    )
    if auto_ticks:
        fig.update_traces(x=[f"{i}: {lab}" for i, lab in enumerate(labels)])
        fig.update_xaxes(
            type="category", tickmode="auto", tickangle=-90, tickvals=None, ticktext=None
        )
    fig.update_yaxes(title=dict(text=html.escape(value_name)), gridcolor="#eee")
    return _layout(fig, title, height)


def lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    log_x: bool = False,
    log_y: bool = False,
    dashed: Sequence[str] = (),
    height: int | None = 340,
) -> go.Figure:
    """Several named lines over one x axis (sweeps against d_k, for example)."""
    fig = go.Figure()
    for name, y in series.items():
        fig.add_trace(
            go.Scatter(
                x=list(x),
                y=list(map(float, y)),
                name=html.escape(name),
                mode="lines+markers",
                line=dict(dash="dash" if name in dashed else "solid"),
            )
        )
    fig.update_xaxes(
        title=html.escape(x_title), type="log" if log_x else "linear", gridcolor="#eee"
    )
    fig.update_yaxes(
        title=html.escape(y_title), type="log" if log_y else "linear", gridcolor="#eee"
    )
    fig.update_layout(legend=dict(orientation="h", y=-0.25), colorway=LINE_COLOURS)
    return _layout(fig, title, height)


def gauge(value: float, *, title: str, lo: float = 0.0, hi: float = 1.0, height: int = 200):
    """A dial for one number (mean max weight, relative entropy)."""
    fig = go.Figure(
        go.Indicator(
            mode="gauge+number",
            value=value,
            number=dict(valueformat=".3f"),
            gauge=dict(axis=dict(range=[lo, hi]), bar=dict(color="#2f6db3")),
            title=dict(text=html.escape(title), font=dict(size=14)),
        )
    )
    fig.update_layout(margin=dict(l=20, r=20, t=50, b=10), height=height, font=FONT)
    return fig


GROUP_COLOURS = [
    "#2f6db3", "#e4572e", "#29a36a", "#9b59b6", "#f0a202", "#17becf", "#d6336c", "#7f7f7f",
]  # fmt: skip


def sharing_diagram(
    kv_of_head: Sequence[int], *, q_label: str = "query heads", kv_label: str = "K/V heads"
) -> go.Figure:
    """Query heads on top, key/value heads below, each query head joined to the K/V head it reads;
    one colour per group."""
    n_heads, n_kv = len(kv_of_head), max(kv_of_head) + 1
    fig = go.Figure()
    kv_x = [(g + 0.5) * n_heads / n_kv - 0.5 for g in range(n_kv)]
    for h, g in enumerate(kv_of_head):
        # Below the markers and stopping at their edges, so no line crosses a label ("KV0").
        fig.add_shape(
            type="line", x0=h, y0=0.86, x1=kv_x[g], y1=0.16, layer="below",
            line=dict(color=GROUP_COLOURS[g % len(GROUP_COLOURS)], width=2),
        )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=list(range(n_heads)),
            y=[1] * n_heads,
            mode="markers+text",
            marker=dict(
                size=34,
                symbol="square",
                color=[GROUP_COLOURS[g % len(GROUP_COLOURS)] for g in kv_of_head],
            ),
            text=[f"Q{h}" for h in range(n_heads)],
            textfont=dict(color="white", size=12),
            hovertemplate="query head %{x}<extra></extra>",
            showlegend=False,
        )
    )
    fig.add_trace(
        go.Scatter(
            x=kv_x,
            y=[0] * n_kv,
            mode="markers+text",
            marker=dict(
                size=50,
                symbol="diamond",
                color=[GROUP_COLOURS[g % len(GROUP_COLOURS)] for g in range(n_kv)],
            ),
            text=[f"KV{g}" for g in range(n_kv)],
            textfont=dict(color="white", size=11),
            hoverinfo="skip",
            showlegend=False,
        )
    )
    fig.update_xaxes(visible=False, range=[-0.8, n_heads - 0.2])
    fig.update_yaxes(
        tickmode="array",
        tickvals=[0, 1],
        ticktext=[html.escape(kv_label), html.escape(q_label)],
        range=[-0.4, 1.4],
        showgrid=False,
        zeroline=False,
    )
    fig.update_layout(plot_bgcolor="white")
    return _layout(fig, "", 240)


def vectors(
    matrix: torch.Tensor | np.ndarray,
    tokens: Sequence[str],
    *,
    title: str = "",
    value_name: str = "value",
    height: int | None = 420,
    max_ticks: int = 16,
    y_title: str = "",
    x_title: str = "dim",
    **kwargs,
) -> go.Figure:
    """One vector per token (rows) over its dimensions (columns), on a scale centred at 0."""
    n_dims = matrix.shape[-1]
    return heatmap(
        matrix,
        [str(i) for i in range(n_dims)],
        tokens,
        title=title,
        value_name=value_name,
        signed=True,
        height=height,
        max_ticks=max_ticks,
        x_title=x_title,
        y_title=y_title,
        **kwargs,
    )


def mark_cells(fig: go.Figure, cells: Sequence[tuple[int, int]]) -> go.Figure:
    """Outline (row, column) cells of a heatmap built by `heatmap` in black: silenced heads."""
    n_rows, n_cols = len(fig.data[0].y), len(fig.data[0].x)
    for r, c in cells:
        if 0 <= r < n_rows and 0 <= c < n_cols:
            fig.add_shape(
                type="rect",
                x0=c - 0.5,
                x1=c + 0.5,
                y0=r - 0.5,
                y1=r + 0.5,
                line=dict(color="#111", width=3),
                name="silenced",
            )
    return fig
