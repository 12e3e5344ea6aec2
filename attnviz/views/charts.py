"""Small charts from plain numbers: bars over tokens, lines over a sweep, a dial, the K/V sharing
diagram, a decoder's next-token bars. Every label HTML-escaped. No streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.measures.next_token import NextToken
from attnviz.views.colour import BLUE, GREY, HIGHLIGHT, PALETTE
from attnviz.views.frames import to_numpy
from attnviz.views.spec import apply_layout, escape, figure, layout_dict, tick_step

# More bars than this are drawn as one filled step outline (_stepped): at 512 a bar trace's 1,256
# SVG elements took most of One query's chart time in Chromium (bench/browser_512.py).
MANY_BARS = 128


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
    hover = f"%{{customdata}}<br>{html.escape(value_name)} %{{y:.4f}}<extra></extra>"
    if len(labels) > MANY_BARS:
        fig = go.Figure(_stepped(v, labels, hover, highlight), layout=dict(showlegend=False))
    else:
        colours = [HIGHLIGHT if i == highlight else BLUE for i in range(len(labels))]
        fig = go.Figure(
            go.Bar(
                x=np.arange(len(labels)), y=v, marker_color=colours, customdata=labels,
                hovertemplate=hover,
            )
        )  # fmt: skip
    step = tick_step(len(labels))
    fig.update_xaxes(
        tickmode="array", tickvals=list(range(0, len(labels), step)), ticktext=labels[::step]
    )
    if auto_ticks:
        names = [f"{i}: {lab}" for i, lab in enumerate(labels)]
        for trace in fig.data:  # each trace's own positions (the step outline's highlight: one)
            trace.x = [names[int(i)] for i in trace.x]
        fig.update_xaxes(
            type="category", tickmode="auto", tickangle=-90, tickvals=None, ticktext=None
        )
    fig.update_yaxes(title=dict(text=html.escape(value_name)), gridcolor="#eee")
    return apply_layout(fig, title, height)


def _stepped(v: np.ndarray, labels: list[str], hover: str, highlight: int | None) -> list:
    """Many bars as one filled step outline (one SVG path; a bar trace draws a group and a path
    per bar, 1,256 elements for 512 keys: One query's and Rollout's bars at long inputs), the
    highlighted position as the one bar drawn over it. Hover reads each position as before."""
    traces = [
        go.Scatter(
            x=np.arange(len(labels)), y=v, mode="lines", fill="tozeroy", fillcolor=BLUE,
            line=dict(shape="hvh", width=1, color=BLUE), customdata=labels, hovertemplate=hover,
        )
    ]  # fmt: skip
    if highlight is not None and 0 <= highlight < len(labels):
        traces.append(
            go.Bar(
                x=[highlight], y=[v[highlight]], width=max(1, len(v) // MANY_BARS),
                marker_color=HIGHLIGHT, customdata=[labels[highlight]], hovertemplate=hover,
            )
        )  # fmt: skip
    return traces


def lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    title: str = "",
    x_title: str = "",
    y_title: str = "",
    log: str = "",
    dashed: Sequence[str] = (),
    height: int | None = 340,
) -> go.Figure:
    """Several named lines over one x axis (sweeps against d_k, for example). `log`: the axes
    drawn on a log scale, "x", "y" or "xy"."""
    log_x, log_y = "x" in log, "y" in log
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
    fig.update_layout(legend=dict(orientation="h", y=-0.25), colorway=list(PALETTE))
    return apply_layout(fig, title, height)


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
            line=dict(color=PALETTE[g % len(PALETTE)], width=2),
        )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=list(range(n_heads)),
            y=[1] * n_heads,
            mode="markers+text",
            marker=dict(
                size=34,
                symbol="square",
                color=[PALETTE[g % len(PALETTE)] for g in kv_of_head],
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
                color=[PALETTE[g % len(PALETTE)] for g in range(n_kv)],
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
    return apply_layout(fig, "", 240)


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
    labels = escape([r.token for r in rows])  # a space or a line break drawn: ␣, ⏎
    y = list(range(len(rows)))
    hover = "%{customdata}<br>" + html.escape(now_label) + " %{x:.4f}<extra></extra>"

    def bars(values: list[float], name: str, colour: str) -> dict:
        tip = hover.replace(html.escape(now_label), html.escape(name))
        return dict(type="bar", x=values, y=y, orientation="h", name=html.escape(name),
                    marker=dict(color=colour), customdata=labels, hovertemplate=tip)  # fmt: skip

    # plain dicts (spec.figure): built for every new sentence of a decoder on the Pretrained page
    data = [bars([float(r.p) for r in rows], now_label, BLUE)]
    extra: dict = dict(
        yaxis=dict(tickmode="array", tickvals=y, ticktext=labels, autorange="reversed",
                   automargin=True),
        xaxis=dict(range=[0, max(1e-6, float(max(r.p for r in rows)), *_bases(rows)) * 1.05]),
    )  # fmt: skip
    if all(r.p_base is not None for r in rows):
        data.append(bars(_bases(rows), base_label, GREY))
        extra |= dict(barmode="group", legend=dict(orientation="h", y=-0.15))
    return figure(data, layout_dict(title, height or 120 + 26 * len(rows), extra))


def _bases(rows: Sequence[NextToken]) -> list[float]:
    return [float(r.p_base) for r in rows if r.p_base is not None]
