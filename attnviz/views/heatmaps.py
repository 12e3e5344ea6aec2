"""Heatmaps of query x key matrices and token x dimension vectors, tokens on the axes (integer
positions, so repeated tokens stay apart; every label HTML-escaped). No streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.views.colour import HIGHLIGHT, SIGNED_SCALE, WEIGHTS_SCALE, named_scale
from attnviz.views.frames import to_numpy
from attnviz.views.spec import escape, figure, layout_dict, tick_step


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
    value_format: str = ".2f",
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
        colorscale=named_scale(colorscale) if isinstance(colorscale, str) else colorscale,
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
        trace["text"] = np.vectorize(lambda v: "" if np.isnan(v) else format(v, value_format))(z)
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
    sx, sy = tick_step(n_k, max_ticks), tick_step(n_q, max_ticks)
    shapes = []
    if highlight_row is not None and 0 <= highlight_row < n_q:
        shapes.append(
            dict(
                type="rect",
                x0=-0.5,
                x1=n_k - 0.5,
                y0=highlight_row - 0.5,
                y1=highlight_row + 0.5,
                line=dict(color=HIGHLIGHT, width=3),
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
                line=dict(color=HIGHLIGHT, width=2, dash="dot"),
            )
        )
    layout = dict(
        xaxis=dict(
            type="category",
            tickmode="array",
            tickvals=x_cat[::sx],
            ticktext=_tick_text(xs, x_cat, sx),
            tickangle=-90 if n_k > 6 else 0,
            side="bottom",
            title=dict(text=x_title, font=dict(size=12)),
            showgrid=False,
        ),
        yaxis=dict(
            type="category",
            tickmode="array",
            tickvals=y_cat[::sy],
            ticktext=_tick_text(ys, y_cat, sy),
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
    return figure(data, layout_dict(title, height, layout))


def _tick_text(tokens: list[str], categories: list[str], step: int) -> list[str]:
    """Every token's label, or, when only every step-th is labelled, "position: token" (a word
    repeated in a long input says nothing on its own); position labels stay as they are."""
    if step == 1:
        return tokens
    return [
        tok if cat == f"{tok}: {tok}" else cat
        for tok, cat in zip(tokens[::step], categories[::step], strict=True)
    ]


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
