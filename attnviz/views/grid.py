"""Several one-map figures as one figure: a layer's heads drawn as pictures in one chart, each
on its own axes, instead of one chart a head. Each plotly chart costs the browser its own set-up,
layout and paint whatever it holds (bench/browser_512.py: ~0.1-0.3 s of Chromium CPU a chart);
one chart of four pictures pays that once. Each map keeps its axes, ticks, title and hover. No
streamlit."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from attnviz.views.spec import figure, layout_dict

TITLE_PX = 28  # above a map: its title (the head)
LABELS_PX = 130  # below a map: its key labels (turned -90°) and the axis title
# of the figure's width, left of every column: its query labels (~100 px in a 1280 px window)
COLUMN_GAP = 0.12


def _axis_names(i: int) -> tuple[str, str]:
    """The i-th map's axes as a trace names them ("x", "x2"...) ."""
    n = "" if i == 0 else str(i + 1)
    return f"x{n}", f"y{n}"


def one_figure(figs: Sequence, per_row: int, plot_px: int, title: str = "") -> go.Figure:
    """`figs` (draw_map's pictures: one x and one y axis each) as one figure, `per_row` maps a
    row, each `plot_px` high at most and square; each map's title above it, its shapes (an
    outlined query row) on its own axes. The layout's height follows from the rows."""
    rows = math.ceil(len(figs) / per_row)
    row_px = TITLE_PX + plot_px + LABELS_PX
    top = 40 if title else 10
    height = top + rows * row_px + 10
    data, layout, notes, shapes = [], {}, [], []
    for i, fig in enumerate(figs):
        spec = fig.to_dict()
        old = spec["layout"]
        x, y = _axis_names(i)
        for trace in spec["data"]:
            data.append({**trace, "xaxis": x, "yaxis": y})
        r, c = divmod(i, per_row)
        left = c / per_row + COLUMN_GAP  # every column as wide: squares of one size
        # px from the top of the plot area -> fractions from its bottom
        y_top = 1 - (r * row_px + TITLE_PX) / (rows * row_px)
        y_bottom = 1 - (r * row_px + TITLE_PX + plot_px) / (rows * row_px)
        layout[f"xaxis{x[1:]}"] = {
            **old["xaxis"], "domain": [left, (c + 1) / per_row], "anchor": y,
            "constrain": "domain",
        }  # fmt: skip
        y_axis = old["yaxis"]
        if c:  # the first column's query title serves its row (no title over the labels)
            y_axis = {**y_axis, "title": {**y_axis.get("title", {}), "text": ""}}
        layout[f"yaxis{y[1:]}"] = {
            **y_axis, "domain": [y_bottom, y_top], "anchor": x, "scaleanchor": x,
            "constrain": "domain", "constraintoward": "top",  # a narrow page: no gap under a title
        }  # fmt: skip
        refs = {"xref": f"{x} domain", "yref": f"{y} domain"}
        head = old.get("title", {}).get("text", "")
        notes.append(dict(text=head, x=0.5, y=1, xanchor="center", yanchor="bottom",
                          showarrow=False, font=dict(size=14), yshift=4, **refs))  # fmt: skip
        for note in old.get("annotations", []) if not c else []:  # a CJK query title, upright
            notes.append({**note, **refs})
        for shape in old.get("shapes", []):
            shapes.append({**shape, "xref": x, "yref": y})
    extra = dict(layout, annotations=notes)
    if shapes:
        extra["shapes"] = shapes
    out = layout_dict(title, height, extra)
    out["margin"] = dict(l=10, r=10, t=top, b=10)  # the rows hold their labels themselves
    return figure(data, out)


__all__ = ["one_figure"]
