"""What a head writes, drawn: each head's push on one token's logit (direct logit attribution) as
a layer x head grid, the rest of the final state beside it, and the logit lens (the residual
stream read out after every layer). Figures from the engine's tables (attnviz.measures.lens), the
same for the app's explorer and `attnviz.show`. No streamlit.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.engine.trace import Trace
from attnviz.views.colour import BLUE, GREY, HIGHLIGHT
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map, mark_cells
from attnviz.views.selection import Selection
from attnviz.views.spec import apply_layout
from attnviz.views.tokens import shown

if TYPE_CHECKING:
    import pandas as pd

K = 3  # tokens each row promotes and suppresses, shown on hover and in the table
LENS_K = 5  # tokens the logit lens lists a layer


def cell(token: str) -> str:
    """A token in hover or cell text: as the one rule draws it (' tired' reads ␣tired), escaped."""
    return html.escape(shown(token), quote=False)


TOKEN_COLUMNS = ("target", "final_token", "promote_", "suppress_", "top_")


def token_columns(table: pd.DataFrame) -> list[str]:
    """The columns of a head-logits or logit-lens table that hold tokens."""
    return [c for c in table.columns if str(c).startswith(TOKEN_COLUMNS)]


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as a page or a CSV shows it: every token drawn by the one rule (␣tired, ⏎⏎),
    numbers unchanged."""
    out = table.copy()
    columns = token_columns(out)
    out[columns] = out[columns].map(lambda t: shown(t) if isinstance(t, str) else t)
    return out


def head_logits_table(model, trace: Trace, sel: Selection) -> pd.DataFrame:
    """attnviz.head_logits at the last token for `sel.token` (None: the model's top next one)."""
    from attnviz.measures.lens import head_logits

    return head_logits(model, trace, -1, sel.token or None, K)


def lens_table(model, trace: Trace) -> pd.DataFrame:
    """attnviz.logit_lens at the last token, LENS_K tokens a layer."""
    from attnviz.measures.lens import logit_lens

    return logit_lens(model, trace, -1, LENS_K)


def head_parts(table: pd.DataFrame) -> list[str]:
    """The attentions whose heads the table has: ["decoder"], or BART's ["decoder", "cross"]."""
    heads = table[table["kind"] == "head"]
    return [p for p in ("decoder", "cross") if (heads["part"] == p).any()] or [None]


def head_grid(table: pd.DataFrame, part: str | None = None) -> tuple[torch.Tensor, np.ndarray]:
    """The heads' logits as a [layer, head] grid, and each head's "promotes … / suppresses …"
    hover text [layer, head] (escaped)."""
    heads = table[table["kind"] == "head"]
    if part is not None and "part" in heads:
        heads = heads[heads["part"] == part]
    n_layers, n_heads = int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1
    grid = torch.zeros(n_layers, n_heads)  # [layer, head]
    text = np.full((n_layers, n_heads), "", dtype=object)
    for row in heads.itertuples(index=False):
        la, h = int(row.layer), int(row.head)
        grid[la, h] = float(row.logit)
        up = " ".join(cell(getattr(row, f"promote_{i + 1}")) for i in range(K))
        down = " ".join(cell(getattr(row, f"suppress_{i + 1}")) for i in range(K))
        text[la, h] = f"+ {up}<br>− {down}"
    return grid, text


def grid_height(n_layers: int) -> int:
    return 100 + min(34, max(16, 720 // max(1, n_layers))) * n_layers


def logits_grid_figure(
    table: pd.DataFrame, sel: Selection, part: str | None = None, off: tuple = ()
) -> go.Figure:
    """Each head's push on the target's logit, layer x head, red up and blue down; hover names
    what the head promotes and suppresses most; a click (its customdata: layer, head) opens it.
    `off`: silenced heads, outlined."""
    tr = sel.tr
    grid, text = head_grid(table, part)
    n_layers, n_heads = grid.shape
    target = table["target"].iloc[0]
    title = tr("wr.dla_title", token=shown(target), logit=table.attrs.get("model_logit", 0.0))
    if part == "cross":
        title = tr("wr.dla_title_cross", token=shown(target))
    fig = draw_map(
        grid,
        Axis([f"H{h}" for h in range(n_heads)], tr("ex.head")),
        Axis([f"L{la}" for la in range(n_layers)], tr("pg.layer")),
        Colour.diverging(tr("wr.logit")),
        Marks(numbers=True),
        Frame(title, grid_height(n_layers)),
    )
    data = [
        [f"{float(grid[la, h]):+.3f}", text[la, h]]
        for la in range(n_layers)
        for h in range(n_heads)
    ]
    hover = f"{html.escape(tr('wr.logit'))} %{{customdata[2]}}<br>%{{customdata[3]}}"
    click_cells(fig, grid.shape, data, hover)
    mark_cells(fig, sorted(off))
    return fig


def click_cells(fig: go.Figure, shape: tuple[int, int], data: list, hover: str) -> go.Figure:
    """Over a layer x head grid drawn by draw_map: one invisible marker a cell whose customdata
    is (layer, head, *data[cell]), so that hover says `hover` (it may read %{customdata[2]}...)
    and a click picks the head (st.plotly_chart's selection event)."""
    n_layers, n_heads = shape
    cells = [(la, h) for la in range(n_layers) for h in range(n_heads)]
    fig.update_xaxes(tickangle=0)
    fig.update_traces(hoverinfo="skip", hovertemplate=None, selector=dict(type="heatmap"))
    fig.add_trace(
        go.Scatter(
            x=[f"{h}: H{h}" for _, h in cells],
            y=[f"{la}: L{la}" for la, _ in cells],
            mode="markers",
            marker=dict(size=18, symbol="square", color="rgba(0,0,0,0)"),
            customdata=[[la, h, *extra] for (la, h), extra in zip(cells, data, strict=True)],
            hovertemplate=f"L%{{customdata[0]}} H%{{customdata[1]}} · {hover}<extra></extra>",
            showlegend=False,
        )
    )
    return fig


def picked(event: dict | None) -> tuple[int, int] | None:
    """The (layer, head) a click on a click_cells grid picked, from st.plotly_chart's event."""
    points = (event or {}).get("selection", {}).get("points", [])
    for point in points:
        data = point.get("customdata")
        if isinstance(data, list) and len(data) >= 2:
            return int(data[0]), int(data[1])
    return None


def rest_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows that are not heads (embeddings, each MLP, the biases), with the heads' sum per
    attention as one row each: together they add up to the target's logit."""
    import pandas as pd

    heads = table[table["kind"] == "head"]
    summed = [
        {"part": part, "kind": "heads (sum)", "layer": pd.NA, "head": pd.NA,
         "logit": float(heads[heads["part"] == part]["logit"].sum())}
        for part in dict.fromkeys(heads["part"])
    ]  # fmt: skip
    rest = table[table["kind"] != "head"][["part", "kind", "layer", "head", "logit"]]
    return pd.concat([pd.DataFrame(summed), rest], ignore_index=True)


def rest_figure(table: pd.DataFrame, sel: Selection) -> go.Figure:
    """The rest of the final state as bars (embeddings, MLPs, biases; the heads summed)."""
    import pandas as pd

    tr = sel.tr
    rows = rest_rows(table)
    labels = []
    for row in rows.itertuples(index=False):
        name = tr(f"wr.kind.{row.kind}")
        if not pd.isna(row.layer):
            name += f" L{int(row.layer)}"
        if row.part == "cross":
            name += f" ({tr('wr.cross')})"
        labels.append(html.escape(name))
    values = rows["logit"].astype(float).to_numpy()
    colours = [HIGHLIGHT if kind == "heads (sum)" else BLUE for kind in rows["kind"]]
    fig = go.Figure(
        go.Bar(
            x=labels, y=values, marker_color=colours, hovertemplate="%{x}: %{y:.3f}<extra></extra>"
        )
    )
    fig.update_xaxes(type="category", tickangle=-35 if len(labels) > 6 else 0)
    fig.update_yaxes(title=html.escape(tr("wr.logit")), gridcolor="#eee", zerolinecolor="#888")
    total = float(values.sum())
    title = tr("wr.rest_title", total=total, logit=table.attrs.get("model_logit", total))
    return apply_layout(fig, title, 360)


def logits_figures(trace: Trace, sel: Selection, model) -> list[go.Figure]:
    """Direct logit attribution (the "logits" view): a grid per attention of each head's push on
    the target token's logit, and the rest of the final state as bars."""
    table = head_logits_table(model, trace, sel)
    return logits_from_table(table, sel, silenced_heads(trace))


def logits_from_table(table: pd.DataFrame, sel: Selection, off: tuple = ()) -> list[go.Figure]:
    grids = [logits_grid_figure(table, sel, part, off) for part in head_parts(table)]
    return [*grids, rest_figure(table, sel)]


def silenced_heads(trace: Trace) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((int(la), int(h)) for la, h in trace.meta.get("ablate", ())))


def lens_from_table(table: pd.DataFrame, sel: Selection) -> list[go.Figure]:
    """The logit lens: per layer (the embeddings first) its top tokens coloured by probability,
    and the probability of the model's final top token, layer by layer."""
    tr = sel.tr
    k = sum(c.startswith("top_") for c in table.columns)
    layers = [tr("wr.embeddings") if la < 0 else f"L{la}" for la in table["layer"]]
    probs = torch.tensor(table[[f"p_{j + 1}" for j in range(k)]].to_numpy(dtype=np.float32))
    final = table["final_token"].iloc[0]
    fig = draw_map(
        probs,  # [layer + 1, k]
        Axis([f"#{j + 1}" for j in range(k)], tr("wr.rank")),
        Axis(layers, tr("pg.layer")),
        Colour(zmin=0.0, zmax=1.0, value="p"),
        Marks(numbers=True),
        # two lines a cell (token, p): 46 px a row, fewer for a deep model (at most ~1,600 px)
        Frame(
            tr("wr.lens_title", token=shown(final)),
            100 + max(30, min(46, 1500 // len(layers))) * len(layers),
        ),
    )
    tokens = table[[f"top_{j + 1}" for j in range(k)]].to_numpy()
    text = [
        [f"{cell(tok)}<br>{float(p):.2f}" for tok, p in zip(row, prow, strict=True)]
        for row, prow in zip(tokens, probs.tolist(), strict=True)
    ]
    fig.update_traces(
        text=text, texttemplate="%{text}", customdata=text,
        hovertemplate="%{y} %{x}: %{customdata}<extra></extra>", selector=dict(type="heatmap"),
    )  # fmt: skip
    fig.update_xaxes(tickangle=0)
    at = list(range(len(layers)))  # numbered: the static SVG draws numeric axes
    ranks = table["final_rank"].astype(int).tolist()
    line = go.Figure(
        go.Scatter(
            x=at, y=table["final_p"].astype(float), mode="lines+markers",
            line=dict(color=HIGHLIGHT), customdata=list(zip(layers, ranks, strict=True)),
            hovertemplate="%{customdata[0]}: p %{y:.3f}, rank %{customdata[1]}<extra></extra>",
        )
    )  # fmt: skip
    line.update_yaxes(title="p", range=[0, 1.02], gridcolor="#eee")
    line.update_xaxes(tickmode="array", tickvals=at, ticktext=layers, gridcolor="#eee",
                      linecolor=GREY)  # fmt: skip
    return [fig, apply_layout(line, tr("wr.lens_final", token=shown(final)), 300)]


def lens_figures(trace: Trace, sel: Selection, model) -> list[go.Figure]:
    """The logit lens (the "lens" view) of the last token."""
    return lens_from_table(lens_table(model, trace), sel)
