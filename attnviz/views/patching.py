"""The Patch view's figures: the exact effect of patching each head (layer x head) beside its
attribution-patching estimate with the misses outlined, and the residual stream's cells (layer x
position) with the causal cone of a picked cell shaded (the cells it can reach: later layers, the
same and later positions). The frames come from attnviz.patch and attnviz.attribution_patching;
`patch_figures` is `attnviz.show(view="patch")`. No streamlit here.
"""

from __future__ import annotations

import html
from dataclasses import replace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from attnviz.engine.trace import Trace
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map, mark_cells
from attnviz.views.selection import Selection
from attnviz.views.spec import escape
from attnviz.views.tokens import shown
from attnviz.views.writes import click_cells, grid_height

# the causal cone: a grey shade (it darkens a cell's colour without changing its hue, which a
# coloured shade did: blue cells turned green) inside a dashed outline
CONE = "rgba(90, 90, 90, 0.16)"
CONE_LINE = dict(color="#e69500", width=2, dash="dash")


def grid_of(frame: pd.DataFrame, column: str, rows: str, cols: str) -> torch.Tensor:
    """A frame's `column` as a [rows, cols] grid (NaN where a row is missing: a stopped sweep)."""
    n_r, n_c = int(frame[rows].max()) + 1, int(frame[cols].max()) + 1
    grid = torch.full((n_r, n_c), float("nan"))
    values = np.array(frame[column].to_numpy(dtype=float), dtype=np.float32)  # a copy
    at_r, at_c = (
        torch.from_numpy(np.array(frame[c].to_numpy(), dtype=np.int64)) for c in (rows, cols)
    )
    grid[at_r, at_c] = torch.from_numpy(values)
    return grid


def _bound(*frames: pd.DataFrame) -> float:
    """One colour range for the maps shown together: the largest |effect|, at least 1."""
    values = [f["effect"].abs().max() for f in frames if f is not None and len(f)]
    found = max([float(v) for v in values if np.isfinite(v)] or [1.0])
    return max(1.0, found)


def heads_figure(
    frame: pd.DataFrame, sel: Selection, title: str, misses=(), bound: float | None = None
) -> go.Figure:
    """The effect of each head, layer x head; hover says the effect (and the exact one beside an
    estimate); a click (customdata: layer, head) opens the head; `misses` are outlined."""
    tr = sel.tr
    grid = grid_of(frame, "effect", "layer", "head")
    n_layers, n_heads = grid.shape
    fig = draw_map(
        grid,
        Axis([f"H{h}" for h in range(n_heads)], tr("ex.head")),
        Axis([f"L{la}" for la in range(n_layers)], tr("pg.layer")),
        # one decimal from 9 heads on: two maps share a 1280-wide page, 26 px a cell
        replace(Colour.diverging(tr("pt.effect"), bound), digits=".2f" if n_heads <= 8 else ".1f"),
        Marks(numbers=n_layers * n_heads <= 400),
        Frame(title, grid_height(n_layers)),
    )
    exact = grid_of(frame, "exact", "layer", "head") if "exact" in frame else None
    data = []
    for la in range(n_layers):
        for h in range(n_heads):
            extra = "" if exact is None else f"<br>{tr('pt.exact')} {float(exact[la, h]):+.3f}"
            data.append([f"{float(grid[la, h]):+.3f}", extra])
    hover = f"{html.escape(tr('pt.effect'))} %{{customdata[2]}}%{{customdata[3]}}"
    click_cells(fig, grid.shape, data, hover)
    outline(fig, sorted(misses))
    return fig


def outline(fig: go.Figure, cells) -> go.Figure:
    """The misses outlined black with a white line inside: seen on a dark cell as on a pale one
    (a black outline alone vanished on the darkest blue)."""
    for r, c in cells:
        box = dict(type="rect", x0=c - 0.5, x1=c + 0.5, y0=r - 0.5, y1=r + 0.5, name="miss")
        fig.add_shape(**box, line=dict(color="#111", width=4))
        inner = dict(box, x0=c - 0.38, x1=c + 0.38, y0=r - 0.38, y1=r + 0.38)
        fig.add_shape(**inner, line=dict(color="#fff", width=1.5))
    return fig


def residual_figure(
    frame: pd.DataFrame, tokens: list[str], sel: Selection, title: str, cell=None, clean=None
) -> go.Figure:
    """The effect of each residual cell, layer x position, along the corrupted `tokens` (where
    `clean` differs: "clean→corrupted"); `cell` (layer, position): its causal cone (layer > L,
    position >= T) shaded and the cell outlined; a click picks a cell."""
    tr = sel.tr
    grid = grid_of(frame, "effect", "layer", "position")
    n_layers, n = grid.shape
    x = Axis([shown(t) for t in tokens[:n]], tr("pt.position"), ticks=None)
    if clean is not None:  # the edited positions read "tired→hungry"
        x = replace(x, tokens=[a if a == b else f"{a}→{b}" for a, b in
                               zip(map(shown, clean[:n]), x.tokens, strict=True)])  # fmt: skip
    y = Axis([f"L{la}" for la in range(n_layers)], tr("pg.layer"), named=True)
    fig = draw_map(
        grid, x, y, Colour.diverging(tr("pt.effect"), _bound(frame)),
        Marks(numbers=n_layers * n <= 300), Frame(title, grid_height(n_layers)),
    )  # fmt: skip
    cells = [(la, p) for la in range(n_layers) for p in range(n)]
    xs = escape(x.tokens)  # the heatmap's categories, as draw_map names them
    fig.update_traces(hoverinfo="skip", hovertemplate=None, selector=dict(type="heatmap"))
    fig.add_trace(
        go.Scatter(
            x=[x.label(p, xs[p]) for _, p in cells],
            y=[y.label(la, y.tokens[la]) for la, _ in cells],
            mode="markers",
            marker=dict(size=14, symbol="square", color="rgba(0,0,0,0)"),
            customdata=[[la, p, f"{float(grid[la, p]):+.3f}"] for la, p in cells],
            hovertemplate=f"L%{{customdata[0]}} · %{{x}} · {html.escape(tr('pt.effect'))} "
            "%{customdata[2]}<extra></extra>",
            showlegend=False,
        )
    )
    if cell is not None and 0 <= cell[0] < n_layers and 0 <= cell[1] < n:
        la, p = cell
        if la + 1 < n_layers:
            cone = dict(x0=p - 0.5, x1=n - 0.5, y0=la + 0.5, y1=n_layers - 0.5)
            fig.add_shape(type="rect", **cone, fillcolor=CONE, line=CONE_LINE, name="cone")
        mark_cells(fig, [(la, p)])
    return fig


def misses_of(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """The (layer, head) cells where the estimate misses the exact effect."""
    if "miss" not in frame:
        return []
    found = frame[frame["miss"].fillna(False).astype(bool)]
    return [(int(a), int(b)) for a, b in zip(found["layer"], found["head"], strict=True)]


def patch_figures(trace: Trace, sel: Selection, pair) -> list[go.Figure]:
    """`attnviz.show(trace, view="patch", model=model, other="corrupt text")`: the exact head
    sweep (trace's text clean, `other` corrupt), the AtP map with its misses outlined, and the
    residual cells' AtP estimate. `sel.token`: the answer (default: the clean run's top)."""
    from attnviz.measures.attribution import attribution_patching
    from attnviz.measures.patching import patch

    model, corrupt = pair
    clean = trace.request.text if trace.request is not None else None
    if clean is None:
        raise ValueError("this trace does not say its text: trace it with attnviz.trace_model")
    answer = sel.token or None
    exact = patch(model, clean, corrupt, answer=answer)
    atp = attribution_patching(model, clean, corrupt, answer=answer, exact=exact)
    resid = attribution_patching(model, clean, corrupt, answer=answer, over="residual")
    tr, b = sel.tr, _bound(exact, atp)
    a = exact.attrs
    names = dict(answer=shown(a["answer"]), foil=shown(a["foil"]))
    return [
        heads_figure(exact, sel, tr("pt.exact_title", **names), bound=b),
        heads_figure(atp, sel, tr("pt.atp_title", **names), misses_of(atp), bound=b),
        residual_figure(
            resid,
            a["corrupt_tokens"],
            sel,
            tr("pt.resid_atp_title", **names),
            clean=a["clean_tokens"],
        ),  # fmt: skip
    ]
