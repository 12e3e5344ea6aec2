"""Figures of the Reproduce page, from a saved report's plain numbers (attnviz.claims records'
`figure` data): the sink share by layer, the first token's norms against the others', raw vs
moved shares on [CLS]/[SEP], the in-context loss curve, the atlas's induction heads' prefix
matching, the knock-out curve against random sets, the lab's loss and induction score by step
and the share of heads needed for 80 % of a task. Labels come translated from the page;
every one is HTML-escaped. No streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go

from attnviz.views.colour import PALETTE
from attnviz.views.spec import apply_layout
from attnviz.views.training import Guides, curves

HEIGHT = 340


def by_layer(series: dict[str, Sequence[float]], title: str, x_title: str, y_title: str):
    """One line per model over its layers (the sink share of each layer's heads)."""
    lines = {name: (range(len(ys)), ys) for name, ys in series.items()}
    return curves(lines, title=title, x_title=x_title, y_title=y_title, height=HEIGHT)


def norms(figure: dict, names: dict[str, str], title: str, x_title: str) -> go.Figure:
    """‖h‖, ‖k‖, ‖v‖ by layer, the first token's solid and the others' mean dotted (log y).
    `names`: "h", "k", "v", "first", "others" -> label."""
    fig = go.Figure()
    for i, x in enumerate(("h", "k", "v")):
        for who, dash in (("first", "solid"), ("others", "dot")):
            ys = figure.get(f"{x}_{who}")
            if ys is None:
                continue
            fig.add_trace(go.Scatter(
                x=list(range(len(ys))), y=list(map(float, ys)), mode="lines+markers",
                name=html.escape(f"{names[x]} · {names[who]}"),
                line=dict(color=PALETTE[i], dash=dash, width=3), marker=dict(size=5),
            ))  # fmt: skip
    fig.update_yaxes(type="log")
    fig.update_xaxes(title_text=html.escape(x_title))
    return apply_layout(fig, title, HEIGHT)


def raw_vs_moved(figure: dict, names: tuple[str, str], title: str, x_title: str, y_title: str):
    """Per layer: the weights' and moved's share on [CLS]/[SEP] as two bars."""
    fig = go.Figure()
    for i, (key, name) in enumerate(zip(("weights", "moved"), names, strict=True)):
        ys = list(map(float, figure[key]))
        fig.add_trace(go.Bar(x=list(range(len(ys))), y=ys, name=html.escape(name),
                             marker_color=PALETTE[i]))  # fmt: skip
    fig.update_layout(barmode="group")
    fig.update_yaxes(tickformat=".0%", title_text=html.escape(y_title))
    fig.update_xaxes(title_text=html.escape(x_title), dtick=1)
    return apply_layout(fig, title, HEIGHT)


def smooth(ys: Sequence[float], half: int) -> list[float]:
    """The mean over each point's window of `half` points either side (shorter at the ends)."""
    out = []
    for i in range(len(ys)):
        window = ys[max(0, i - half) : i + half + 1]
        out.append(sum(window) / len(window))
    return out


def loss_curve(series: dict[str, dict], title: str, x_title: str, y_title: str, half: int = 5):
    """Each model's mean loss by token position (smoothed over ±`half` tokens), the two
    positions the in-context score compares marked."""
    lines, marks = {}, {}
    for name, figure in series.items():
        ys = smooth(list(map(float, figure["loss"])), half)
        lines[name] = (range(1, len(ys) + 1), ys)
        marks = {str(figure["early"]): figure["early"], str(figure["late"]): figure["late"]}
    return curves(lines, title=title, x_title=x_title, y_title=y_title, height=HEIGHT,
                  guides=Guides(marks=marks))  # fmt: skip


def prefix_bars(figure: dict, names: tuple[str, str], title: str, y_title: str, threshold: float):
    """The atlas's top induction heads: their score on the probes and on new repeated words."""
    fig = go.Figure()
    heads = [html.escape(h) for h in figure["heads"]]
    for i, (key, name) in enumerate(zip(("atlas", "scores"), names, strict=True)):
        fig.add_trace(go.Bar(x=heads, y=list(map(float, figure[key])), name=html.escape(name),
                             marker_color=PALETTE[i]))  # fmt: skip
    fig.add_hline(y=threshold, line=dict(dash="dash", color="#555"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text=html.escape(y_title), range=[0, 1])
    fig = apply_layout(fig, title, HEIGHT)
    fig.update_layout(margin_b=max(fig.layout.margin.b or 0, 60))  # room for the heads' names
    return fig


def knockout(figure: dict, names: dict[str, str], title: str) -> go.Figure:
    """The second copy's loss with the top-k induction heads silenced, against each random set
    of k heads (points) and their mean; the unchanged second and first copies as lines.
    `names`: "top", "random", "random_mean", "base", "first", "k", "loss" -> label."""
    ks, top, rand = figure["k"], figure["top"], figure["random"]
    fig = go.Figure()
    xs = [k for k, sets in zip(ks, rand, strict=True) for _ in sets]
    ys = [float(v) for sets in rand for v in sets]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=html.escape(names["random"]),
                             marker=dict(color="#999", size=7, opacity=0.6)))  # fmt: skip
    mean = [sum(sets) / len(sets) for sets in rand]
    fig.add_trace(go.Scatter(x=ks, y=mean, mode="lines", name=html.escape(names["random_mean"]),
                             line=dict(color="#777", dash="dot", width=2)))  # fmt: skip
    line = dict(color=PALETTE[1], width=3)
    fig.add_trace(go.Scatter(x=ks, y=list(map(float, top)), mode="lines+markers", line=line,
                             name=html.escape(names["top"]), marker=dict(size=9)))  # fmt: skip
    for key, dash in (("base", "dash"), ("first", "dashdot")):
        fig.add_hline(y=float(figure[key]), line=dict(dash=dash, color="#333"),
                      annotation_text=html.escape(names[key]),
                      annotation_position="top left")  # fmt: skip
    fig.update_xaxes(title_text=html.escape(names["k"]), dtick=1)
    fig.update_yaxes(title_text=html.escape(names["loss"]))
    return apply_layout(fig, title, HEIGHT)


def phase(figure: dict, names: dict[str, str], title: str) -> go.Figure:
    """The lab's run: the loss on the repeated and on the first half and the best induction
    score (right axis) by step, the induction step and the loss-bump step marked.
    `names`: "loss", "loss_first", "induction", "induction_step", "bump_step", "step", "loss_axis",
    "score_axis" -> label."""
    steps = list(map(float, figure["step"]))
    fig = go.Figure()
    for i, (key, dash) in enumerate((("loss", "solid"), ("loss_first", "dot"))):
        fig.add_trace(go.Scatter(x=steps, y=list(map(float, figure[key])), mode="lines",
                                 name=html.escape(names[key]),
                                 line=dict(color=PALETTE[0], dash=dash, width=3 - i)))  # fmt: skip
    fig.add_trace(go.Scatter(x=steps, y=list(map(float, figure["induction"])), mode="lines",
                             name=html.escape(names["induction"]), yaxis="y2",
                             line=dict(color=PALETTE[1], width=3)))  # fmt: skip
    for key, dash in (("induction_step", "dash"), ("bump_step", "dot")):
        if figure.get(key) is not None:
            fig.add_vline(
                x=float(figure[key]),
                line=dict(dash=dash, color="#333"),
                annotation_text=html.escape(f"{names[key]} {figure[key]:g}"),
                annotation_position="bottom right" if key == "bump_step" else "top left",
            )
    fig.update_xaxes(title_text=html.escape(names["step"]))
    fig.update_yaxes(title_text=html.escape(names["loss_axis"]))
    fig = apply_layout(fig, title, HEIGHT)
    fig.update_layout(yaxis2=dict(title=dict(text=html.escape(names["score_axis"])),
                                  overlaying="y", side="right", range=[0, 1.02],
                                  tickvals=[0, 0.25, 0.5, 0.75, 1], showgrid=False),
                      legend=dict(orientation="h", yanchor="top", y=-0.25, x=0))  # fmt: skip
    fig.add_shape(
        type="line",
        xref="paper",
        x0=0,
        x1=1,
        yref="y2",
        y0=0.5,
        y1=0.5,
        line=dict(dash="dash", color=PALETTE[1], width=1),
    )  # the threshold, 0.5
    fig.update_layout(height=HEIGHT + 60, margin_b=max(fig.layout.margin.b or 0, 120))
    return fig


def heads_bars(records: dict[str, dict], title: str, y_title: str) -> go.Figure:
    """Per model: the share of its heads that carry 80 % of the task's effect, the count and
    the attention kind written on each bar. `records`: model -> its numbers."""
    models = [html.escape(m) for m in records]
    shares = [float(n["share_of_heads"] or 0.0) for n in records.values()]
    labels = [html.escape(("—" if n["heads_needed"] is None
                           else f"{n['heads_needed']} / {n['heads']}")
                          + f" · {n['attention']} {n['query_heads']}/{n['kv_heads']}")
              for n in records.values()]  # fmt: skip
    fig = go.Figure(go.Bar(x=models, y=shares, text=labels, textposition="outside",
                           marker_color=PALETTE[0], cliponaxis=False))  # fmt: skip
    fig.update_yaxes(tickformat=".0%", title_text=html.escape(y_title), rangemode="tozero")
    fig = apply_layout(fig, title, HEIGHT)
    fig.update_layout(margin_b=max(fig.layout.margin.b or 0, 60))  # room for the models' names
    return fig
