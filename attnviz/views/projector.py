"""Projector mode for figures: bigger fonts, tick labels, numbers in cells. No streamlit here.

A room reads a projected chart from metres away: every font of a figure grows by FACTOR (the
page's CSS grows the rest of the UI by the same step), and figures with a height grow a little so
the bigger labels do not eat the plot.
"""

from __future__ import annotations

import plotly.graph_objects as go

FACTOR = 1.4  # fonts
HEIGHT_FACTOR = 1.2  # figure heights
BASE_FONT = 13  # spec.FONT's size: what a figure without an explicit size uses
BASE_TICKS = 12


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
    if layout.height and not any(trace.type == "image" for trace in fig.data):
        fig.update_layout(height=round(layout.height * HEIGHT_FACTOR))

    def axis(ax) -> None:
        ax.tickfont.size = _grow(ax.tickfont.size, BASE_TICKS, factor)
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
