"""One map of values [q, k] (weights, scores, vectors...) drawn as numbers, a heatmap or a picture:
`draw_map` decides by its cells, and is the only place that knows the thresholds.

What a map shows is said with four small objects instead of twenty keywords: an `Axis` a side
(its tokens, title, first position, how many labels), a `Colour` (scale, range, signed or not,
the colour bar), `Marks` (numbers in the cells, an outlined row or column) and a `Frame` (title,
height, the note a picture gets). Tokens sit on integer positions (repeats stay apart) and are
HTML-escaped. No streamlit.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.views import images
from attnviz.views.colour import (
    GAMMA,
    HIGHLIGHT,
    MOSAIC_LEVELS,
    SIGNED_SCALE,
    WEIGHTS_SCALE,
    colour_lut,
    colour_scale,
    coloured,
    named_scale,
)
from attnviz.views.frames import to_numpy
from attnviz.views.spec import escape, figure, layout_dict, tick_step

# The thresholds, here only. A heatmap sends every value (about 5 bytes a cell on the wire) and
# gives hover; a picture is a palette PNG, tens of kilobytes at any size (bench/long_latency.py).
NUMBERS_CELLS = 400  # numbers printed in the cells, when asked, up to this many cells
HEATMAP_CELLS = 512 * 512  # a heatmap of weights up to this many cells (Head detail's window)
SIGNED_HEATMAP_CELLS = 256 * 256  # a signed one (scores, logits) up to this many
THIN = 64  # a map this narrow on one side (vectors, one query) stays a heatmap up to HEATMAP_CELLS
PICTURE_SIDE = 256  # a picture of a longer map is pooled to at most this many pixels a side
THIN_GAPS = 40  # cells get a 1 px gap up to this many a side
# Several maps on one page (All heads) send their values together up to this many cells, else
# each is a picture: 12 heads of 512 x 512 were 17.6 MB of numbers and 10.5 s to draw.
PAGE_CELLS = 2**18


@dataclass(frozen=True)
class Axis:
    """One side of a map: a label per position, the axis title, the position the first one has
    (a window of a longer input), and how many labels at most (None: as many as the pixels allow,
    chosen by the browser; zooming in labels more) and, drawn as a picture, `picture_ticks`.
    `labels`: False hides the tick labels. `positions`: each label's own position where they are
    not consecutive (the tokens two texts share), numbered so instead of from `start`. `named`: the
    labels are unique names (L3H1), drawn as they are, never numbered by position."""

    tokens: Sequence[str]
    title: str = ""
    start: int = 0
    ticks: int | None = 48
    labels: bool = True
    picture_ticks: int = 32
    positions: Sequence[int] | None = None
    named: bool = False

    def number(self, j: int) -> int:
        """The position label j is numbered with."""
        return self.start + j if self.positions is None else int(self.positions[j])

    def escaped(self) -> list[str]:
        """The labels as tick and hover text: tokens as the one rule draws them (spaces as ␣),
        names (L3H1, "MLP 5") as they are; HTML-escaped either way."""
        if self.named:
            return [html.escape(str(t), quote=False) for t in self.tokens]
        return escape(self.tokens)

    def label(self, j: int, tok: str) -> str:
        """Label j as drawn: "position: token", or the name itself for named labels."""
        return tok if self.named else f"{self.number(j)}: {tok}"

    @classmethod
    def dims(cls, n: int, title: str = "dim", ticks: int = 16) -> Axis:
        """The dimensions of a vector, numbered."""
        return cls([str(i) for i in range(n)], title, ticks=ticks)


@dataclass(frozen=True)
class Colour:
    """How a value becomes a colour: a scale (a name or stops) from zmin to zmax, or `signed`: a
    diverging scale centred on 0 (the range from the largest |value| unless given). `value`
    names a cell's value in hover, `bar` titles the colour bar, `gamma` colours a picture of
    weights by (w / max)^gamma, `digits` formats printed numbers."""

    scale: str | list = WEIGHTS_SCALE
    zmin: float | None = None
    zmax: float | None = None
    signed: bool = False
    value: str = "weight"
    bar: str = ""
    show_bar: bool = True
    gamma: float = 1.0
    digits: str = ".2f"

    @classmethod
    def weights(cls, matrix, mode: str, value: str, bar: str, gamma: float = 1.0) -> Colour:
        """The weights' colour under a scale mode (attnviz.views.colour.SCALES), its bar titled."""
        found = colour_scale(matrix, mode)
        return cls(found["colorscale"], found["zmin"], found["zmax"], value=value, bar=bar,
                   gamma=gamma)  # fmt: skip

    @classmethod
    def diverging(cls, value: str, bound: float | None = None, show_bar: bool = True) -> Colour:
        """A signed value on a scale centred on 0, -bound to +bound (None: the largest |value|)."""
        lo = None if bound is None else -bound
        return cls(SIGNED_SCALE, lo, bound, signed=True, value=value, show_bar=show_bar)


@dataclass(frozen=True)
class Marks:
    """What is drawn over the colours: the numbers in the cells (small maps), an outlined query
    row and key column (positions in the matrix), and the cells the mask hides (`masked`, bool
    [q, k], True = may not attend): drawn blank and printed "–", never as a weight of 0.00.
    `values`: False when the view needs no value under the pointer (a preview beside the numbers
    elsewhere): it is then always a picture."""

    numbers: bool = False
    row: int | None = None
    col: int | None = None
    values: bool = True
    masked: Any = field(default=None, compare=False)

    @classmethod
    def of_mask(cls, mask, **marks) -> Marks:
        """Marks hiding the cells a "may attend" mask [q, k] forbids (None: every cell allowed)."""
        if mask is None or bool(torch.as_tensor(mask).all()):
            return cls(**marks)
        return cls(masked=~torch.as_tensor(mask, dtype=torch.bool), **marks)


@dataclass(frozen=True)
class Frame:
    """The figure around a map: its title, its height in pixels, and what its title adds when
    the map is drawn as a picture (it then has no numbers)."""

    title: str = ""
    height: int | None = None
    picture_note: str = field(default="", compare=False)


def is_picture(shape: tuple[int, int], full: tuple[int, int], colour: Colour) -> bool:
    """Whether a map of `shape` (pooled from `full`, or the same) is drawn as a picture."""
    cells = full[0] * full[1]
    if tuple(shape) != tuple(full):  # pooled already: there are no numbers to send
        return True
    if min(full) <= THIN:
        return cells > HEATMAP_CELLS
    return cells > (SIGNED_HEATMAP_CELLS if colour.signed else HEATMAP_CELLS)


def values_fit(maps: int, n_q: int, n_k: int) -> bool:
    """Whether `maps` maps of n_q x n_k on one page may all send their values (hover)."""
    return maps * n_q * n_k <= PAGE_CELLS


def positions_per_pixel(n: int) -> int:
    """How many positions a side one pixel of a picture of an n-position map averages."""
    return -(-n // PICTURE_SIDE)


def draw_map(
    matrix: torch.Tensor | np.ndarray,
    x: Axis,
    y: Axis,
    colour: Colour,
    marks: Marks = Marks(),
    frame: Frame = Frame(),
) -> go.Figure:
    """A map [q, k] with `y` down the side and `x` along the bottom: a heatmap (hover, and the
    numbers themselves when Marks.numbers and it is small), or a picture when it is too big for
    that or arrives pooled (fewer cells than its axes have positions). -inf (a masked logit) is an
    empty cell ("−∞" where numbers are printed), white in a picture."""
    full = (len(y.tokens), len(x.tokens))
    shape = tuple(matrix.shape[-2:])
    if marks.values and not is_picture(shape, full, colour):
        return _heatmap(to_numpy(matrix), x, y, colour, marks, frame)
    if frame.picture_note:
        frame = Frame(frame.title + frame.picture_note, frame.height)
    m = torch.as_tensor(matrix).detach().float().cpu()
    if colour.signed:
        return _signed_picture(m, x, y, colour, frame)
    if marks.masked is not None and tuple(m.shape) == full:  # masked cells white, not "0"
        m = m.masked_fill(torch.as_tensor(marks.masked, dtype=torch.bool), float("nan"))
    fig = _weights_picture(m, full, x, y, colour, frame)
    for shape in _outlines(marks, *full, (x.start, y.start)).get("shapes", []):
        fig.add_shape(shape)  # a focus row outlined over the picture, as over the heatmap
    return fig


def bound(z: np.ndarray | torch.Tensor) -> float:
    """The largest finite |value|, or 1 where there is none: a signed map's colour range."""
    z = to_numpy(z)
    finite = np.isfinite(z)
    return float(np.abs(z[finite]).max()) if finite.any() else 1.0


def _colour_bar(colour: Colour) -> dict:
    return dict(
        thickness=10,
        xpad=4,
        title=dict(text=html.escape(colour.bar), side="right", font=dict(size=11)),
    )


def _heatmap(z: np.ndarray, x: Axis, y: Axis, colour: Colour, marks: Marks, frame: Frame):
    z = z.copy()  # [q, k]
    minus_inf = np.isneginf(z)  # masked logits: drawn blank, labelled −∞ with the numbers
    z[~np.isfinite(z)] = np.nan
    hidden = np.zeros(z.shape, dtype=bool)  # [q, k] cells the mask forbids: blank, "–"
    if marks.masked is not None:
        hidden = to_numpy(torch.as_tensor(marks.masked)).astype(bool) & ~minus_inf
        z[hidden] = np.nan
    n_q, n_k = z.shape
    xs, ys = x.escaped(), y.escaped()
    # Categories numbered "i: token" keep repeated tokens apart and give hover its labels without
    # a per-cell array (which plotly deep-copies on every update: 50 ms for one 64x64 map).
    x_cat = [x.label(j, tok) for j, tok in enumerate(xs)]
    y_cat = [y.label(i, tok) for i, tok in enumerate(ys)]
    scale, zmin, zmax = colour.scale, colour.zmin, colour.zmax
    if colour.signed and zmin is None:
        b = bound(z)
        zmin, zmax = -b, b
    value = html.escape(colour.value, quote=False)
    trace = dict(
        type="heatmap",
        z=z,
        x=x_cat,
        y=y_cat,
        colorscale=named_scale(scale) if isinstance(scale, str) else scale,
        zmin=zmin,
        zmax=zmax,
        showscale=colour.show_bar,
        colorbar=_colour_bar(colour),
        xgap=1 if n_k <= THIN_GAPS else 0,
        ygap=1 if n_q <= THIN_GAPS else 0,
        hovertemplate=f"{y.title} %{{y}}<br>{x.title} %{{x}}<br>{value} %{{z:.4f}}<extra></extra>",
    )
    if hidden.any():
        trace["hoverongaps"] = False  # a masked cell has no value to show
    numbers = marks.numbers and n_q * n_k <= NUMBERS_CELLS
    if numbers:
        trace["text"] = np.vectorize(lambda v: "" if np.isnan(v) else format(v, colour.digits))(z)
        trace["texttemplate"] = "%{text}"
        trace["textfont"] = dict(size=11)
    data = [trace]
    for cells, label in ((minus_inf, "−∞"), (hidden, "–")):
        if numbers and cells.any():
            # A text trace, not the heatmap's own text: plotly skips the text of empty (NaN) cells.
            qi, kj = np.nonzero(cells)
            data.append(
                dict(
                    type="scatter",
                    mode="text",
                    x=[x_cat[j] for j in kj],
                    y=[y_cat[i] for i in qi],
                    text=[label] * len(qi),
                    textfont=dict(size=11, color="#555"),
                    hoverinfo="skip",
                    showlegend=False,
                )
            )
    layout = dict(
        xaxis=_category_axis(x, xs, x_cat, dict(tickangle=_key_angle(x, xs), side="bottom")),
        yaxis=_category_axis(y, ys, y_cat, dict(autorange="reversed")),
        **_outlines(marks, n_q, n_k),
    )
    return figure(data, layout_dict(frame.title, frame.height, layout))


UPRIGHT_KEYS = 24  # at most this many one-character key labels stand upright


def _key_angle(axis: Axis, labels: list[str]) -> int:
    """Key labels turned on their side past 6 keys, except single characters (a Chinese text's
    tokens) labelled one by one, which stand upright: on its side a character is hard to read
    and touched the next. (Labels the browser picks read "position: token".)"""
    n = len(labels)
    one_by_one = axis.ticks is not None and tick_step(n, axis.ticks) == 1
    if n <= 6 or (one_by_one and n <= UPRIGHT_KEYS and all(len(t) == 1 for t in labels)):
        return 0
    return -90


def _category_axis(axis: Axis, escaped: list[str], cats: list[str], extra: dict) -> dict:
    """A heatmap's axis: its labels every k-th position ("position: token" when some are left
    out), or chosen by the browser from the pixels it has (Axis.ticks None)."""
    out = dict(type="category", **extra, showgrid=False)
    out["title"] = dict(text=axis.title if axis.labels else "", font=dict(size=12))
    if not axis.labels:
        out["showticklabels"] = False
    if axis.ticks is None:
        out["tickmode"] = "auto"
        return _ordered(out)
    step = tick_step(len(cats), axis.ticks)
    out["tickmode"] = "array"
    out["tickvals"] = cats[::step]
    # every token, or, when only every step-th is labelled, "position: token" (a word repeated in
    # a long input says nothing on its own); labels that are positions already stay as they are
    out["ticktext"] = escaped if step == 1 else [
        tok if cat == f"{tok}: {tok}" else cat
        for tok, cat in zip(escaped[::step], cats[::step], strict=True)
    ]  # fmt: skip
    return _ordered(out)


_AXIS_ORDER = ("type", "tickmode", "tickvals", "ticktext", "tickangle", "side", "showticklabels",
               "autorange", "title", "showgrid")  # fmt: skip


def _ordered(axis: dict) -> dict:
    # the keys in one order, so that the JSON a browser gets does not depend on how it was built
    return {k: axis[k] for k in _AXIS_ORDER if k in axis}


def _outlines(marks: Marks, n_q: int, n_k: int, at: tuple[int, int] = (0, 0)) -> dict:
    """The outlined row and column, in axis units: cells of a heatmap, positions counted from
    `at` (key, query) in a picture."""
    shapes, (x0, y0) = [], at
    if marks.row is not None and 0 <= marks.row < n_q:
        row = y0 + marks.row
        shapes.append(dict(type="rect", x0=x0 - 0.5, x1=x0 + n_k - 0.5, y0=row - 0.5,
                           y1=row + 0.5, line=dict(color=HIGHLIGHT, width=3)))  # fmt: skip
    if marks.col is not None and 0 <= marks.col < n_k:
        shapes.append(dict(type="rect", x0=x0 + marks.col - 0.5, x1=x0 + marks.col + 0.5,
                           y0=y0 - 0.5, y1=y0 + n_q - 0.5,
                           line=dict(color=HIGHLIGHT, width=2, dash="dot")))  # fmt: skip
    return {"shapes": shapes} if shapes else {}


def _position_axes(x: Axis, y: Axis, shape: tuple[int, int]) -> dict:
    """A picture's axes, counting positions from each Axis.start: ticks name every k-th token as
    "position: token", queries run downwards, square cells."""
    n_q, n_k = shape
    xs, ys = escape(x.tokens[:n_k]), escape(y.tokens[:n_q])
    sx, sy = tick_step(n_k, x.picture_ticks), tick_step(n_q, y.picture_ticks)
    # "allow": the labels sit inside the figure (automargin); plotly's default for a linear axis
    # ("hide past div") measures every label once per label drawn (n² layouts an axis)
    plain = dict(tickmode="array", showgrid=False, zeroline=False, ticklabeloverflow="allow")
    xaxis = dict(
        plain,
        tickvals=[x.start + j for j in range(0, n_k, sx)],
        ticktext=[x.label(j, xs[j]) for j in range(0, n_k, sx)],
        tickangle=-90,
        side="bottom",
        range=[x.start - 0.5, x.start + n_k - 0.5],
        title=dict(text=x.title, font=dict(size=12)),
    )
    yaxis = dict(
        plain,
        tickvals=[y.start + i for i in range(0, n_q, sy)],
        ticktext=[y.label(i, ys[i]) for i in range(0, n_q, sy)],
        range=[y.start + n_q - 0.5, y.start - 0.5],
        scaleanchor="x",
        constrain="domain",
        title=dict(text=y.title, font=dict(size=12)),
    )
    return dict(xaxis=xaxis, yaxis=yaxis)


def _position_hover(x: Axis, y: Axis) -> str:
    """A picture's hover: the query and key positions under the pointer."""
    return f"{html.escape(y.title)} %{{y:.0f}}<br>{html.escape(x.title)} %{{x:.0f}}<extra></extra>"


def _weights_picture(w: torch.Tensor, full, x: Axis, y: Axis, colour: Colour, frame: Frame):
    """Weights [q, k] (or already pooled) as a 256-colour PNG, average-pooled to at most
    PICTURE_SIDE pixels a side and coloured like the overview's thumbnails ((w/max)^gamma)."""
    n_q, n_k = full
    h_px, w_px = min(n_q, PICTURE_SIDE, w.shape[0]), min(n_k, PICTURE_SIDE, w.shape[1])
    blank = torch.isnan(w).float()  # [q, k] masked cells (NaN): white where a pixel is all masked
    w = w.nan_to_num(0.0)
    if (h_px, w_px) != tuple(w.shape):
        w = torch.nn.functional.adaptive_avg_pool2d(w[None, None], (h_px, w_px))[0, 0]
        blank = torch.nn.functional.adaptive_avg_pool2d(blank[None, None], (h_px, w_px))[0, 0]
    blank = blank >= 1.0  # [h_px, w_px]
    img = coloured(w / w.amax().clamp_min(1e-12), colour.gamma)  # [h_px, w_px, rgb]
    img[blank.numpy()] = 255
    dx, dy = n_k / w_px, n_q / h_px  # tokens per pixel
    image = dict(
        type="image",
        source=images.png_data_uri(img),
        x0=(dx - 1) / 2,  # pixel i is centred on the tokens it averages
        dx=dx,
        y0=(dy - 1) / 2,
        dy=dy,
        hovertemplate=_position_hover(x, y),
    )
    return figure([image], layout_dict(frame.title, frame.height, _position_axes(x, y, full)))


def _signed_picture(z: torch.Tensor, x: Axis, y: Axis, colour: Colour, frame: Frame):
    """Signed values [q, k] (scores, logits) as a palette PNG, one pixel a cell, from -bound
    (blue) to +bound (red) like a signed heatmap; -inf and NaN (masked logits) white."""
    finite = torch.isfinite(z)
    top = colour.zmax if colour.zmax is not None else bound(z)
    norm = (z.nan_to_num(0.0, 0.0, 0.0) / max(top, 1e-12)).clamp(-1, 1)  # [q, k]
    levels = MOSAIC_LEVELS
    img = colour_lut(SIGNED_SCALE, levels)[((norm + 1) / 2 * (levels - 1)).round().long().numpy()]
    img[~finite.numpy()] = 255  # [q, k, rgb]
    image = dict(
        type="image", source=images.png_data_uri(img), x0=x.start, dx=1, y0=y.start, dy=1,
        hovertemplate=_position_hover(x, y),
    )  # fmt: skip
    # The colour bar: an image has none, so a one-cell heatmap on the same scale that nobody sees
    # (opacity 0, no hover) carries it; the pixels' colours are the scale's at the same levels.
    bar = dict(
        type="heatmap", z=[[0.0]], x=[x.start], y=[y.start], zmin=-top, zmax=top, opacity=0,
        colorscale=named_scale(SIGNED_SCALE), hoverinfo="skip", showscale=True,
        colorbar=dict(thickness=10, xpad=4),
    )  # fmt: skip
    axes = _position_axes(x, y, tuple(z.shape))
    return figure([image, bar], layout_dict(frame.title, frame.height, axes))


def mark_cells(fig: go.Figure, cells: Sequence[tuple[int, int]]) -> go.Figure:
    """Outline (row, column) cells of a heatmap drawn by draw_map in black: silenced heads."""
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


__all__ = ["GAMMA", "Axis", "Colour", "Frame", "Marks", "bound", "draw_map", "mark_cells"]
