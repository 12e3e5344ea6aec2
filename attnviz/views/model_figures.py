"""Figures for pretrained models of any family: next-token probabilities with their change under
the what-if knobs. Plain data in, go.Figure out; no streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnviz.engine.next_token import NextToken
from attnviz.views.figures import LINE_COLOURS, _layout, escape


def next_tokens(
    rows: Sequence[NextToken],
    *,
    title: str = "",
    now_label: str = "p",
    base_label: str = "p (unchanged)",
    height: int | None = None,
) -> go.Figure:
    """Horizontal bars, most likely on top: this trace's probability, and beside it the unchanged
    model's when the rows carry one (integer rows with escaped token labels)."""
    if not rows:
        raise ValueError("no next-token rows to draw")
    labels = escape([repr(r.token)[1:-1] for r in rows])  # whitespace tokens stay visible
    y = np.arange(len(rows))
    now = np.array([r.p for r in rows], dtype=np.float32)
    hover = "%{customdata}<br>" + html.escape(now_label) + " %{x:.4f}<extra></extra>"
    fig = go.Figure(
        go.Bar(
            x=now,
            y=y,
            orientation="h",
            name=html.escape(now_label),
            marker_color=LINE_COLOURS[0],
            customdata=labels,
            hovertemplate=hover,
        )
    )
    if all(r.p_base is not None for r in rows):
        base = np.array([r.p_base for r in rows], dtype=np.float32)
        fig.add_trace(
            go.Bar(
                x=base,
                y=y,
                orientation="h",
                name=html.escape(base_label),
                marker_color="#b8b8b8",
                customdata=labels,
                hovertemplate=hover.replace(html.escape(now_label), html.escape(base_label)),
            )
        )
        fig.update_layout(barmode="group", legend=dict(orientation="h", y=-0.15))
    fig.update_yaxes(
        tickmode="array", tickvals=list(y), ticktext=labels, autorange="reversed", automargin=True
    )
    fig.update_xaxes(range=[0, max(1e-6, float(max(r.p for r in rows)), *_bases(rows)) * 1.05])
    return _layout(fig, title, height or 120 + 26 * len(rows))


def _bases(rows: Sequence[NextToken]) -> list[float]:
    return [float(r.p_base) for r in rows if r.p_base is not None]
