"""Two inputs compared head by head (attnviz.measures.compare), drawn: a layer x head grid of how
much each head's weights (or moved) changed, and one head's maps of both inputs side by side with
their difference over the tokens that align. The same for the app and `attnviz.show`. No
streamlit.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import plotly.graph_objects as go
import torch

from attnviz.engine.bands import bins, indicator
from attnviz.engine.trace import Trace, rows_per_band
from attnviz.views.colour import HIGHLIGHT
from attnviz.views.maps import PICTURE_SIDE, Axis, Colour, Frame, Marks, draw_map
from attnviz.views.panels import head_map, weights_colour
from attnviz.views.selection import Selection
from attnviz.views.writes import click_cells, grid_height

if TYPE_CHECKING:
    import pandas as pd


def compare_table(a: Trace, b: Trace, field: str) -> pd.DataFrame:
    """attnviz.compare(a, b, field): every head ranked by how much it changed from a to b."""
    from attnviz.measures.compare import compare

    return compare(a, b, field)


def compare_tables(a: Trace, b: Trace) -> dict[str, pd.DataFrame]:
    """compare_table for weights and, where both traces have the per-key norms, moved: one pass
    over both traces for both (the app's switch between them then costs nothing)."""
    from attnviz.measures.compare import compare_fields

    fields = ("weights", "moved") if a.has("moved") and b.has("moved") else ("weights",)
    return compare_fields(a, b, fields)


def aligned(table: pd.DataFrame) -> bool:
    """Whether the table compares rows of aligned tokens (else per-head statistics only)."""
    return bool(len(table)) and table["method"].iloc[0] == "aligned"


def change_grid_figure(table: pd.DataFrame, sel: Selection) -> go.Figure:
    """How much each head changed (layer x head; aligned: change_rel, else the statistics'
    score), the picked head (sel.layer, sel.head) outlined; a click picks another."""
    tr = sel.tr
    n_layers, n_heads = int(table["layer"].max()) + 1, int(table["head"].max()) + 1
    grid = torch.zeros(n_layers, n_heads)  # [layer, head]
    rank = {}
    for row in table.itertuples(index=False):
        grid[int(row.layer), int(row.head)] = float(row.score)
        rank[(int(row.layer), int(row.head))] = int(row.rank)
    top = float(grid.max())
    by = "change" if aligned(table) else "score"
    fig = draw_map(
        grid,
        Axis([f"H{h}" for h in range(n_heads)], tr("ex.head")),
        Axis([f"L{la}" for la in range(n_layers)], tr("pg.layer")),
        Colour(zmin=0.0, zmax=max(top, 1e-9), value=tr(f"cmp.{by}"),
               digits=".2f" if top >= 0.05 else ".2g"),
        Marks(numbers=True),
        Frame(tr(f"cmp.grid_title.{sel.field}" if by == "change" else "cmp.grid_title_stats"),
              grid_height(n_layers)),
    )  # fmt: skip
    data = [[rank[(la, h)]] for la in range(n_layers) for h in range(n_heads)]
    click_cells(fig, (n_layers, n_heads), data, f"{html.escape(tr('cmp.rank'))} %{{customdata[2]}}")
    la, h = sel.layer, sel.head
    if 0 <= la < n_layers and 0 <= h < n_heads:
        fig.add_shape(type="rect", x0=h - 0.5, x1=h + 0.5, y0=la - 0.5, y1=la + 0.5,
                      line=dict(color=HIGHLIGHT, width=3))  # fmt: skip
    return fig


def pairs_of(table: pd.DataFrame, a: Trace, b: Trace) -> tuple[torch.Tensor, ...]:
    """The aligned query rows of a and b and aligned key columns of a and b. [m] each"""
    pairs = table.attrs.get("aligned", [])
    rows = [(i, j) for i, j in pairs if i < a.layers[0].n_q and j < b.layers[0].n_q]
    cols = [(i, j) for i, j in pairs if i < a.layers[0].n_k and j < b.layers[0].n_k]
    out = []
    for chosen in (rows, cols):
        out += [torch.tensor([p[0] for p in chosen], dtype=torch.long),
                torch.tensor([p[1] for p in chosen], dtype=torch.long)]  # fmt: skip
    return tuple(out)


def aligned_difference(a: Trace, b: Trace, sel: Selection, table: pd.DataFrame) -> torch.Tensor:
    """b's map minus a's over the tokens that align, [rows, cols] (aligned positions), pooled to
    at most PICTURE_SIDE a side a band of rows at a time (a long input: never n x n at once)."""
    qa, qb, ka, kb = pairs_of(table, a, b)
    la, lb, h = a.layers[sel.layer], b.layers[sel.layer], sel.head
    m_r, m_c = len(qa), len(ka)
    th, tw = min(m_r, PICTURE_SIDE), min(m_c, PICTURE_SIDE)
    row_s, row_e = bins(m_r, th)
    col_s, col_e = bins(m_c, tw)
    cmat = indicator(col_s, col_e, 0, m_c).T  # [cols, tw]
    out = torch.zeros(th, tw)
    step = rows_per_band(la.n_k + lb.n_k)
    for r0 in range(0, m_r, step):
        r1 = min(m_r, r0 + step)
        xa = la.block(sel.field, h, qa[r0:r1])[:, ka]  # [r, cols]
        xb = lb.block(sel.field, h, qb[r0:r1])[:, kb]  # [r, cols]
        rmat = indicator(row_s, row_e, r0, r1)  # [th, r]
        out += rmat @ (xb - xa) @ cmat
    area = ((row_e - row_s).unsqueeze(1) * (col_e - col_s).unsqueeze(0)).float()
    return out / area  # [th, tw]


def pair_figures(a: Trace, b: Trace, sel: Selection, table: pd.DataFrame) -> list[go.Figure]:
    """One head of both inputs side by side and, where tokens align, b − a over those tokens."""
    tr, layer, head, field = sel.tr, sel.layer, sel.head, sel.field
    mode = "max" if field == "moved" else (sel.scale or "fixed")
    figs = []
    for which, trace in (("a", a), ("b", b)):
        w, full = head_map(trace, layer, head, PICTURE_SIDE, field)  # [q, k], or pooled
        whole = tuple(w.shape) == full  # a pooled map has no cells to blank
        mask = trace.layers[layer].block("mask", head) if whole else None  # [q, k], w's size
        marks = Marks.of_mask(mask)  # masked: blank
        figs.append(draw_map(
            w, Axis(trace.key_tokens, tr("w.key"), ticks=None),
            Axis(trace.tokens, tr("w.query"), ticks=None),
            weights_colour(w, mode, tr, field=field), marks,
            Frame(tr(f"cmp.map_{which}", l=layer, h=head), 460),
        ))  # fmt: skip
    if aligned(table):
        qa, _, ka, _ = pairs_of(table, a, b)
        diff = aligned_difference(a, b, sel, table)  # [rows, cols] aligned
        figs.append(draw_map(
            diff, Axis([a.key_tokens[j] for j in ka], tr("w.key"), ticks=None,
                       positions=ka.tolist()),  # your text's positions, as its map numbers them
            Axis([a.tokens[i] for i in qa], tr("w.query"), ticks=None, positions=qa.tolist()),
            Colour.diverging(tr("cmp.diff_value")), Marks(),
            Frame(tr("cmp.map_diff", l=layer, h=head), 460),
        ))  # fmt: skip
    return figs


def compare_figures(trace: Trace, sel: Selection, other: Trace) -> list[go.Figure]:
    """The "compare" view: every head's change from `trace` to `other` as a grid, then the
    selected head of both side by side and their difference."""
    table = compare_table(trace, other, sel.field)
    return [change_grid_figure(table, sel), *pair_figures(trace, other, sel, table)]
