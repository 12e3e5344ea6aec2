"""The information-flow graph drawn (attnviz.measures.flow): the positions it reaches across, the
layers up, each kept edge a line whose width grows with its weight: residual edges grey and
upright, each head's edge from a source token blue (a marker on it opens the head), each MLP a
square on its layer's step. The same figure for the app's explorer and `attnviz.show`. No
streamlit.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from attnviz.engine.trace import Trace
from attnviz.views.colour import BLUE, GREY, HIGHLIGHT, PALETTE
from attnviz.views.selection import Selection
from attnviz.views.spec import apply_layout
from attnviz.views.tokens import shown

if TYPE_CHECKING:
    import pandas as pd

# an edge's line width by its weight: at most WIDTHS[i] px for weights up to EDGES[i]
EDGES = (0.1, 0.2, 0.4, 0.7, 1.0)
WIDTHS = (1.0, 2.0, 3.5, 5.5, 8.0)
MLP = PALETTE[2]
TOP = 12  # head edges offered by the picker under the graph


def flow_table(
    model, trace: Trace, sel: Selection, position: int = -1, progress=None
) -> pd.DataFrame:
    """attnviz.flow_graph from `position` (-1: the last token) at the selection's threshold."""
    from attnviz.measures.flow import THRESHOLD, flow_graph

    tau = THRESHOLD if sel.threshold is None else sel.threshold
    return flow_graph(model, trace, position, tau, progress=progress)


def _y(layer: int, stage: str) -> int:
    return 2 * int(layer) + (1 if stage == "mid" else 2)


def _width(weight: float) -> int:
    return next((i for i, top in enumerate(EDGES) if weight <= top), len(EDGES) - 1)


def head_edges(table: pd.DataFrame) -> pd.DataFrame:
    """The heads' rows, strongest first: (layer, head, src_pos, dst_pos, weight)."""
    heads = table[table.kind == "head"]
    return heads.sort_values("weight", ascending=False, kind="stable")


def csv_table(table: pd.DataFrame) -> pd.DataFrame:
    """The edges as a CSV holds them: with each end's token drawn by the one rule (␣tired)."""
    import pandas as pd

    tokens = table.attrs["tokens"]
    src = [None if pd.isna(p) else shown(tokens[int(p)]) for p in table.src_pos]
    return table.assign(src_token=src, dst_token=[shown(tokens[int(p)]) for p in table.dst_pos])


def _positions(table: pd.DataFrame) -> list[int]:
    edges = table[table.kind != "bias"]
    return sorted({int(p) for p in edges.dst_pos} | {int(p) for p in edges.src_pos})


def _lines(
    table: pd.DataFrame, x: dict[int, int], colour: str, kind: str, thin: float = 1.0
) -> list[go.Scatter]:
    """One trace per width (times `thin`): every edge of `kind` as a segment (None between)."""
    rows = table[table.kind == kind]
    out = []
    for w in range(len(WIDTHS)):
        xs: list = []
        ys: list = []
        for r in rows.itertuples(index=False):
            if _width(float(r.weight)) == w:
                xs += [x[int(r.src_pos)], x[int(r.dst_pos)], None]
                ys += [_y(r.src_layer, r.src_stage), _y(r.dst_layer, r.dst_stage), None]
        if xs:
            line = dict(color=colour, width=WIDTHS[w] * thin)
            out.append(go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip",
                                  showlegend=False, opacity=0.75))  # fmt: skip
    return out


def _head_marks(table: pd.DataFrame, x: dict[int, int], tokens: list[str], tr) -> go.Scatter:
    """A marker a head's edge, on its segment (several heads on one segment spread along it):
    hover names the head, the tokens and the weight; its customdata (layer, head) opens it."""
    heads = table[table.kind == "head"]
    seen: dict[tuple, int] = {}
    counts = heads.groupby(["dst_layer", "src_pos", "dst_pos"]).size().to_dict()
    xs, ys, data, sizes = [], [], [], []
    for r in heads.itertuples(index=False):
        edge = (r.dst_layer, r.src_pos, r.dst_pos)
        k, m = seen.get(edge, 0), counts[edge]
        seen[edge] = k + 1
        f = 0.5 if m == 1 else 0.3 + 0.4 * k / (m - 1)
        x0, x1 = x[int(r.src_pos)], x[int(r.dst_pos)]
        y0, y1 = _y(r.src_layer, r.src_stage), _y(r.dst_layer, r.dst_stage)
        xs.append(x0 + f * (x1 - x0))
        ys.append(y0 + f * (y1 - y0))
        src, dst = (html.escape(shown(tokens[int(p)])) for p in (r.src_pos, r.dst_pos))
        data.append([int(r.dst_layer), int(r.head), src, dst, float(r.weight)])
        sizes.append(7 + 6 * float(r.weight))
    hover = (
        "L%{customdata[0]} H%{customdata[1]}: %{customdata[2]} → %{customdata[3]}<br>"
        + html.escape(tr("fl.weight"))
        + " %{customdata[4]:.3f}<br>"
        + html.escape(tr("fl.click"))
        + "<extra></extra>"
    )
    return go.Scatter(
        x=xs, y=ys, mode="markers", customdata=data, hovertemplate=hover, showlegend=False,
        marker=dict(size=sizes, color=BLUE, line=dict(color="white", width=1)),
    )  # fmt: skip


def _mlp_marks(table: pd.DataFrame, x: dict[int, int], tr) -> go.Scatter | None:
    rows = table[table.kind == "mlp"]
    if rows.empty:
        return None
    return go.Scatter(
        x=[x[int(p)] for p in rows.dst_pos],
        y=[_y(la, "mid") + 0.5 for la in rows.dst_layer],
        mode="markers", showlegend=False,
        marker=dict(symbol="square", color=MLP, size=[6 + 8 * float(w) for w in rows.weight]),
        text=[
            f"MLP L{int(la)}: {html.escape(tr('fl.weight'))} {float(w):.3f}"
            for la, w in zip(rows.dst_layer, rows.weight, strict=True)
        ],  # text, not customdata: a click on an MLP picks no head
        hovertemplate="%{text}<extra></extra>",
    )  # fmt: skip


def _node_marks(table: pd.DataFrame, x: dict[int, int], tokens: list[str], tr) -> go.Scatter:
    """A small dot a state the graph holds; hover names its layer, stage and token."""
    edges = table[table.kind != "bias"]
    nodes = set(zip(edges.dst_layer, edges.dst_stage, edges.dst_pos, strict=True))
    nodes |= set(zip(edges.src_layer, edges.src_stage, edges.src_pos, strict=True))
    nodes = sorted((int(la), st, int(p)) for la, st, p in nodes)
    text = []
    for la, stage, p in nodes:
        where = tr("wr.embeddings") if la < 0 else f"L{la} " + tr(f"fl.{stage}")
        text.append(f"{html.escape(where)} · {p}: {html.escape(shown(tokens[p]))}")
    return go.Scatter(
        x=[x[p] for _, _, p in nodes], y=[_y(la, st) for la, st, _ in nodes], mode="markers",
        marker=dict(size=5, color=GREY), text=text, hovertemplate="%{text}<extra></extra>",
        showlegend=False,
    )  # fmt: skip


def flow_figure(table: pd.DataFrame, sel: Selection) -> go.Figure:
    """The graph: positions it reaches (in order) across, the embeddings then each layer's two
    states up, edges by weight; the node the prediction is read from outlined."""
    tr = sel.tr
    tokens = table.attrs["tokens"]
    n_layers, top = table.attrs["n_layers"], table.attrs["position"]
    pos = _positions(table) or [top]
    x = {p: i for i, p in enumerate(pos)}
    fig = go.Figure()
    # the residual carries most of every state: drawn at half width, so the heads stand out
    for trace in _lines(table, x, GREY, "residual", 0.5) + _lines(table, x, BLUE, "head"):
        fig.add_trace(trace)
    fig.add_trace(_node_marks(table, x, tokens, tr))
    mlp = _mlp_marks(table, x, tr)
    if mlp is not None:
        fig.add_trace(mlp)
    fig.add_trace(_head_marks(table, x, tokens, tr))
    fig.add_trace(
        go.Scatter(
            x=[x[top]], y=[_y(n_layers - 1, "out")], mode="markers", showlegend=False,
            marker=dict(size=14, color="rgba(0,0,0,0)", line=dict(color=HIGHLIGHT, width=3)),
            hovertemplate=html.escape(tr("fl.output")) + "<extra></extra>",
        )
    )  # fmt: skip
    step = max(1, n_layers // 15)  # at most ~16 layer labels
    ticks = [0] + [_y(la, "out") for la in range(0, n_layers, step)]
    labels = [tr("wr.embeddings")] + [f"L{la}" for la in range(0, n_layers, step)]
    fig.update_yaxes(tickmode="array", tickvals=ticks, ticktext=labels, gridcolor="#eee",
                     range=[-1, 2 * n_layers + 1], title=html.escape(tr("pg.layer")))  # fmt: skip
    every = -(-len(pos) // 40)  # at most ~40 token labels; hover names every node anyway
    text = [f"{p}: {html.escape(shown(tokens[p]))}" for p in pos[::every]]
    fig.update_xaxes(tickmode="array", tickvals=list(range(0, len(pos), every)), ticktext=text,
                     tickangle=-45 if len(pos) > 8 else 0, range=[-0.6, len(pos) - 0.4],
                     showgrid=False)  # fmt: skip
    title = tr("fl.title", token=shown(tokens[top]), tau=table.attrs["threshold"],
               nodes=table.attrs["nodes"], edges=len(table))  # fmt: skip
    # two rows a layer: a shallow model gets room to read them (4 layers: 400 px; 30: 880 px)
    return apply_layout(fig, title, 160 + min(60, max(18, 720 // n_layers)) * n_layers)


def flow_figures(trace: Trace, sel: Selection, model) -> list[go.Figure]:
    """The information-flow graph (the "flow" view) from the last token."""
    return [flow_figure(flow_table(model, trace, sel), sel)]
