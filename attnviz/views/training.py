"""Figures of the Generate and Training lab pages, from plain numbers: curves over training steps
with a marked step and a threshold, the KV cache growing over generation steps. Every label
HTML-escaped. No streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from attnviz.views.colour import HIGHLIGHT, PALETTE
from attnviz.views.spec import apply_layout


@dataclass(frozen=True)
class Guides:
    """Lines drawn over curves: a dashed horizontal `threshold` named `threshold_name`, and
    `marks`, name -> x of a dotted vertical line labelled with the name (e.g. the step where an
    induction head appeared)."""

    threshold: float | None = None
    threshold_name: str = ""
    marks: dict[str, float] | None = None


def curves(
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    x_title: str,
    y_title: str,
    log_y: bool = False,
    guides: Guides = Guides(),
    height: int = 340,
    from_zero: bool = True,
) -> go.Figure:
    """Named lines, each (x, y) of its own (runs may stop at different steps), with `guides`;
    `from_zero`: the x axis starts at 0."""
    threshold, threshold_name, marks = guides.threshold, guides.threshold_name, guides.marks
    fig = go.Figure()
    for i, (name, (x, y)) in enumerate(series.items()):
        fig.add_trace(
            go.Scatter(
                x=list(map(float, x)),
                y=list(map(float, y)),
                name=html.escape(name),
                mode="lines",
                line=dict(color=PALETTE[i % len(PALETTE)], width=3),
            )
        )
    if threshold is not None:
        fig.add_hline(
            y=threshold,
            line=dict(dash="dash", color="#555"),
            annotation_text=html.escape(threshold_name),
            annotation_position="bottom right",
        )
    for name, x in (marks or {}).items():
        fig.add_vline(
            x=x,
            line=dict(dash="dot", color=HIGHLIGHT, width=3),
            annotation_text=html.escape(name),
            annotation_position="top left",
        )
    fig.update_xaxes(
        title=html.escape(x_title), gridcolor="#eee", rangemode="tozero" if from_zero else "normal"
    )
    fig.update_yaxes(
        title=html.escape(y_title), type="log" if log_y else "linear", gridcolor="#eee"
    )
    fig.update_layout(legend=dict(orientation="h", y=-0.3))
    return apply_layout(fig, title, height)


def cache_growth(
    positions: Sequence[int],
    kv_bytes: Sequence[int],
    current: int,
    *,
    title: str,
    x_title: str,
    y_title: str,
    height: int = 300,
) -> go.Figure:
    """The KV cache's size (KiB) after each generation step, the step shown marked."""
    kib = [b / 1024 for b in kv_bytes]
    fig = go.Figure(
        [
            go.Scatter(
                x=list(positions),
                y=kib,
                mode="lines+markers",
                line=dict(color=PALETTE[0], width=3),
                hovertemplate="%{x}: %{y:.1f} KiB<extra></extra>",
                showlegend=False,
            ),
            go.Scatter(
                x=[positions[current]],
                y=[kib[current]],
                mode="markers",
                marker=dict(color=HIGHLIGHT, size=16),
                hoverinfo="skip",
                showlegend=False,
            ),
        ]
    )
    fig.update_xaxes(title=html.escape(x_title), gridcolor="#eee")
    fig.update_yaxes(title=html.escape(y_title), gridcolor="#eee", rangemode="tozero")
    return apply_layout(fig, title, height)
