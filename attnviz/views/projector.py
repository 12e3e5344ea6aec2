"""Projector mode for figures: bigger fonts, tick labels, numbers in cells. No streamlit here.

A room reads a projected chart from metres away: every font of a figure grows by FACTOR (the
page's CSS grows the rest of the UI by the same step), and figures with a height grow a little so
the bigger labels do not eat the plot.
"""

from __future__ import annotations

import re

import plotly.graph_objects as go

from attnviz.views.spec import UPRIGHT_PX, WIDE, title_pad

FACTOR = 1.4  # fonts
HEIGHT_FACTOR = 1.2  # figure heights
BASE_FONT = 13  # spec.FONT's size: what a figure without an explicit size uses
BASE_TICKS = 12
# A title line longer than this (a CJK character counts two) breaks in projector mode: at 21 px a
# chart in half of a 1280 px page cut "BatchNorm(x): columns mean 0, std 1 over the batch".
TITLE_UNITS = 40
MAX_TICKS = 10  # an axis labelled at more given positions keeps every other one: bigger labels
BREAKS = re.compile(r"[ ：，、:,]")  # where a title line may break (after it)


def _units(text: str) -> int:
    return sum(2 if WIDE.match(c) else 1 for c in text)


def _wrapped(line: str) -> list[str]:
    """A title line as lines of at most TITLE_UNITS, broken after a space or a comma or colon."""
    out = []
    while _units(line) > TITLE_UNITS:
        cuts = [m.end() for m in BREAKS.finditer(line) if _units(line[: m.end()]) <= TITLE_UNITS]
        if not cuts:
            break
        out.append(line[: cuts[-1]].rstrip())
        line = line[cuts[-1] :]
    return [*out, line]


def _fewer(axis) -> None:
    """Every other label of an axis labelled at many given positions (a picture's 16 dims)."""
    if axis.tickmode == "array" and axis.tickvals is not None and len(axis.tickvals) > MAX_TICKS:
        axis.tickvals = axis.tickvals[::2]
        if axis.ticktext is not None:
            axis.ticktext = axis.ticktext[::2]


def _grow(size: float | None, default: float, factor: float) -> int:
    return round((size or default) * factor)


def enlarge(fig: go.Figure, factor: float = FACTOR) -> go.Figure:
    """Scale every font of `fig` by `factor` (in place; returns it)."""
    if factor <= 0:
        raise ValueError(f"factor={factor} must be above 0")
    layout = fig.layout
    base = layout.font.size or BASE_FONT
    fig.update_layout(font_size=_grow(base, BASE_FONT, factor))
    if layout.title.text:
        fig.update_layout(title_font_size=_grow(layout.title.font.size, base + 2, factor))
        lines = layout.title.text.split("<br>")
        wrapped = [part for line in lines for part in _wrapped(line)]
        fig.update_layout(title_text="<br>".join(wrapped))
        if layout.title.yanchor == "top":
            fig.update_layout(title_pad_t=title_pad(len(wrapped), layout.title.font.size))
        if layout.margin.t is not None:  # spec.layout_dict's room: the bigger lines need more
            size = layout.title.font.size
            upright = any(note.yanchor == "bottom" for note in layout.annotations)
            need = title_pad(1, size) + round(1.3 * size * len(wrapped)) + 4
            need += round(UPRIGHT_PX * factor) if upright else 0
            fig.update_layout(margin_t=max(layout.margin.t, need))
    if layout.height and not any(trace.type == "image" for trace in fig.data):
        fig.update_layout(height=round(layout.height * HEIGHT_FACTOR))

    def axis(ax) -> None:
        ax.tickfont.size = _grow(ax.tickfont.size, BASE_TICKS, factor)
        _fewer(ax)
        if ax.type == "log" and ax.dtick is None:  # bigger labels: the decades only ("5 10 2")
            ax.dtick = 1
        if ax.title.text:
            ax.title.font.size = _grow(ax.title.font.size, BASE_TICKS, factor)

    fig.for_each_xaxis(axis)
    fig.for_each_yaxis(axis)
    for note in fig.layout.annotations:  # a y title set upright (attnviz.views.spec.upright)
        note.font.size = _grow(note.font.size, BASE_TICKS, factor)
    for trace in fig.data:
        if "textfont" in trace and trace.textfont.size:
            # every number in a cell grows: a page gives a wide matrix a row of its own in
            # projector mode (and fewer decimals), so bigger digits do not run together
            trace.textfont.size = _grow(trace.textfont.size, BASE_FONT, factor)
        if trace.type == "heatmap" and trace.colorbar is not None:
            trace.colorbar.tickfont.size = _grow(trace.colorbar.tickfont.size, BASE_TICKS, factor)
            if trace.colorbar.title.text:
                bar = trace.colorbar.title.font
                bar.size = _grow(bar.size, BASE_TICKS, factor)
        if trace.type == "scatter" and trace.mode and "text" in trace.mode and trace.marker.size:
            # labelled markers (the sharing diagram's Q0 / KV0) grow with their text
            trace.marker.size = _grow(trace.marker.size, 10, factor)
        if trace.type == "indicator":
            trace.title.font.size = _grow(trace.title.font.size, 14, factor)
            trace.number.font.size = _grow(trace.number.font.size, 30, factor)
    return fig
