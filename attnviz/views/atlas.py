"""The head atlas drawn: every head of one part as a layer x head grid coloured by role (scores on
hover), one head's example row as bars over its keys, and the table's columns. Plain data in
(head_roles' DataFrame, a row of weights), go.Figure out."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from attnviz.views.colour import GREY, HIGHLIGHT, PALETTE
from attnviz.views.spec import FONT, escape, figure

# One colour per role, legible on a projector and apart from each other.
ROLE_COLOURS = {
    "previous_token": PALETTE[0],
    "first_token": PALETTE[4],
    "self": PALETTE[2],
    "duplicate_token": PALETTE[3],
    "induction": PALETTE[1],
    "special": PALETTE[5],
    "punctuation": PALETTE[6],
    "broad": PALETTE[9],
    "mixed": GREY,
}
HOVER_SCORES = (
    "previous_token", "first_token", "self", "duplicate_token", "induction", "entropy",
    "special", "punctuation", "distance",
)  # fmt: skip


@dataclass(frozen=True)
class GridWords:
    """The grid's words in the page's language: a role's name (`role`) and the short name inside
    its square (`short`, default its first five letters), a score's name, the title, and the
    titles of the (layer, head) axes."""

    role: Callable[[str], str]
    score: Callable[[str], str]
    title: str = ""
    short: Callable[[str], str] | None = None
    axes: tuple[str, str] = ("layer", "head")


def grid(frame: pd.DataFrame, words: GridWords, chosen: tuple[int, int] | None = None) -> go.Figure:
    """The layer x head grid of one part: a square per head in its primary role's colour with
    the role's short name inside, a small dot in the colour of each further role it passes
    (`frame.roles`, e.g. an induction head that is also a sink), every role and score on hover,
    one legend entry per role present. Points carry (layer, head) as customdata, so a click on
    one picks that head. The squares are shapes in data coordinates, so they keep their gaps at
    any width (projector mode, 1280 px); the clickable marker sits at each square's centre."""
    n_layers, n_heads = int(frame.layer.max()) + 1, int(frame["head"].max()) + 1
    cell = max(16, min(64, 860 // n_heads))  # px per head at a typical page width
    # Plain dicts in one figure: adding 73 squares one add_shape at a time re-validated the whole
    # layout each time (1.2 s a rerun of the atlas page).
    passed = {(r.layer, r.head): r.roles.split(",") for r in frame.itertuples()}
    data = _primary_roles(frame, passed, words, cell)
    data += _further_roles(passed, words.role, cell, {d["legendgroup"] for d in data})
    layout = dict(
        title=dict(text=words.title, font=dict(size=15)),
        font=FONT,
        height=200 + cell * n_layers,
        margin=dict(l=60, r=20, t=50, b=80),
        plot_bgcolor="white",
        # below the head axis's title at any number of layers (a fraction of the plot's height)
        legend=dict(orientation="h", x=0, yanchor="top", y=-52 / (70 + cell * n_layers)),
        clickmode="event+select",
        dragmode=False,
        shapes=_squares(frame, chosen),
        xaxis=dict(
            title=dict(text=words.axes[1]), tickmode="array", tickvals=list(range(n_heads)),
            range=[-0.6, n_heads - 0.4], showgrid=False, zeroline=False, fixedrange=True,
        ),
        yaxis=dict(
            title=dict(text=words.axes[0]), tickmode="array", tickvals=list(range(n_layers)),
            range=[n_layers - 0.5, -0.5], showgrid=False, zeroline=False, fixedrange=True,
        ),
    )  # fmt: skip
    return figure(data, layout)


def _primary_roles(
    frame: pd.DataFrame, passed: dict[tuple[int, int], list[str]], words: GridWords, cell: int
) -> list[dict]:
    """One trace per primary role present: a clickable marker at each of its heads' centres,
    its short name inside when the squares are big enough, every role and score on hover."""
    size = max(8, min(20, round(cell * 0.4)))  # the marker, inside its square at any width
    short_label = words.short or (lambda role: words.role(role)[:5])
    data = []
    for role, colour in ROLE_COLOURS.items():
        rows = frame[frame.role == role]
        if rows.empty:
            continue
        hover = [
            "<br>".join(
                [f"<b>L{r.layer} H{r.head}: "
                 + " · ".join(html.escape(words.role(x)) for x in passed[(r.layer, r.head)])
                 + "</b>"]
                + [f"{words.score(s)}: {getattr(r, s):.3f}" for s in HOVER_SCORES]
            )
            for r in rows.itertuples()
        ]  # fmt: skip
        data.append(
            dict(
                type="scatter",
                x=rows["head"].tolist(),
                y=rows["layer"].tolist(),
                mode="markers+text" if cell >= 40 else "markers",
                name=words.role(role),
                legendgroup=role,
                marker=dict(symbol="square", size=size, color=colour, line=dict(width=0)),
                text=[short_label(role)] * len(rows),
                textfont=dict(color="white", size=11),
                customdata=rows[["layer", "head"]].to_numpy().tolist(),
                hovertext=hover,
                hoverinfo="text",
            )
        )
    return data


def _squares(frame: pd.DataFrame, chosen: tuple[int, int] | None) -> list[dict]:
    """A square per head in its primary role's colour, and an outline round the chosen one."""
    half = 0.44  # a square's half side, in cells
    shapes = [
        dict(
            type="rect",
            x0=r.head - half,
            x1=r.head + half,
            y0=r.layer - half,
            y1=r.layer + half,
            fillcolor=ROLE_COLOURS[r.role],
            line=dict(width=0),
            layer="below",
        )  # fmt: skip
        for r in frame.itertuples()
    ]
    if chosen is not None:
        shapes.append(
            dict(
                type="rect",
                x0=chosen[1] - 0.5,
                x1=chosen[1] + 0.5,
                y0=chosen[0] - 0.5,
                y1=chosen[0] + 0.5,
                line=dict(color="black", width=3),
                fillcolor="rgba(0,0,0,0)",
            )  # fmt: skip
        )
    return shapes


def _further_roles(
    passed: dict[tuple[int, int], list[str]],
    role_label: Callable[[str], str],
    cell: int,
    shown: set[str],
) -> list[dict]:
    """A dot per further role a head passes, along its square's lower edge, in the role's
    colour (one trace a role, in the role's legend group; a legend entry only for a role that
    is nobody's primary)."""
    dots: dict[str, tuple[list, list]] = {}
    for (layer, head), roles in passed.items():
        for n, role in enumerate(roles[1:]):
            xs, ys = dots.setdefault(role, ([], []))
            xs.append(head - 0.3 + 0.2 * n)
            ys.append(layer + 0.3)
    return [
        dict(
            type="scatter",
            x=xs,
            y=ys,
            mode="markers",
            name=role_label(role),
            legendgroup=role,
            showlegend=role not in shown,
            hoverinfo="skip",
            marker=dict(
                symbol="circle",
                size=max(5, min(10, round(cell * 0.16))),
                color=ROLE_COLOURS[role],
                line=dict(color="white", width=1),
            ),
        )  # fmt: skip
        for role, (xs, ys) in dots.items()
    ]


def example_bars(
    weights: Sequence[float], keys: Sequence[str], query: int, key: int, title: str
) -> go.Figure:
    """One query row of one head: its weight on every key, the key the role points at in the
    highlight colour, the query's own position outlined."""
    colours = [HIGHLIGHT if j == key else PALETTE[0] for j in range(len(keys))]
    widths = [2.5 if j == query else 0 for j in range(len(keys))]
    labels = [f"{j}: {tok}" for j, tok in enumerate(escape(keys))]
    fig = go.Figure(
        go.Bar(
            x=list(range(len(keys))),
            y=[float(w) for w in weights],
            marker=dict(color=colours, line=dict(color="black", width=widths)),
            hovertext=labels,
            hovertemplate="%{hovertext}<br>w = %{y:.3f}<extra></extra>",
        )
    )
    step = max(1, len(keys) // 40)
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)),
        font=FONT,
        height=300,
        margin=dict(l=50, r=20, t=50, b=90),
        plot_bgcolor="white",
        yaxis=dict(range=[0, 1.02], title="w", gridcolor="#eee"),
        xaxis=dict(
            tickmode="array",
            tickvals=list(range(0, len(keys), step)),
            ticktext=escape(keys)[::step],
            tickangle=-60,
        ),
    )
    return fig


def qk_scatter(
    points: pd.DataFrame, colour_by: str, labels: dict[str, str], title: str
) -> go.Figure:
    """The Q/K map: queries as dots, keys as open diamonds, coloured by position (a colour bar)
    or by the kind of token (`points.token_kind`); each point carries (text, position) so a click
    can open its row. `labels`: "query", "key" and each token kind, in the page's language."""
    fig = go.Figure()
    for kind, symbol in (("query", "circle"), ("key", "diamond-open")):
        part = points[points.kind == kind]
        hover = [
            f"{labels[kind]} {p}: {tok} (#{t})"
            for p, tok, t in zip(part.position, escape(part.token.tolist()), part.text, strict=True)
        ]
        common = dict(
            mode="markers",
            hovertext=hover,
            hoverinfo="text",
            customdata=part[["text", "position"]].to_numpy().tolist(),
        )
        if colour_by == "position":
            fig.add_trace(
                go.Scatter(
                    x=part.x.tolist(), y=part.y.tolist(), name=labels[kind],
                    marker=dict(
                        symbol=symbol, size=8, color=part.position.tolist(),
                        colorscale="Viridis", showscale=kind == "query",
                        colorbar=dict(title="pos", x=1.02),
                    ),
                    **common,
                )
            )  # fmt: skip
            continue
        for j, token_kind in enumerate(("word", "punctuation", "special")):
            sub = part.token_kind == token_kind
            if not sub.any():
                continue
            fig.add_trace(
                go.Scatter(
                    x=part.x[sub].tolist(), y=part.y[sub].tolist(),
                    name=f"{labels[kind]} · {labels[token_kind]}",
                    marker=dict(symbol=symbol, size=8, color=PALETTE[j]),
                    **{**common, "hovertext": [h for h, s in zip(hover, sub, strict=True) if s],
                       "customdata": [c for c, s in zip(common["customdata"], sub, strict=True)
                                      if s]},
                )
            )  # fmt: skip
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)),
        font=FONT,
        height=520,
        margin=dict(l=40, r=20, t=50, b=40),
        plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.08),
        clickmode="event+select",
    )
    fig.update_xaxes(showticklabels=False, zeroline=False, gridcolor="#f0f0f0")
    fig.update_yaxes(showticklabels=False, zeroline=False, gridcolor="#f0f0f0", scaleanchor="x")
    return fig
