"""All heads of one layer, with two dials that show how saturated their softmax is."""

from __future__ import annotations

import streamlit as st
import torch

from attnviz.engine import stats
from attnviz.engine.trace import Trace
from attnviz.serve.memos import per_trace
from attnviz.ui.explorer.pickers import pick_focus, pick_layer, pick_scale, selection
from attnviz.ui.language import t
from attnviz.ui.widgets import chart, grid
from attnviz.views import charts, panels


def saturation(trace: Trace, layer: int) -> None:
    """Two dials that move when scaling, temperature or d_k change."""
    n_k = trace.layers[layer].n_k
    # once per trace and layer (a long input's is summed a band of rows at a time)
    top, entropy = per_trace(trace, ("saturation", layer), lambda: stats.saturation(trace, layer))
    c1, c2 = st.columns(2)
    with c1:
        chart(charts.gauge(top, title=t("ex.gauge_max")), key="gauge_max")
    with c2:
        rel = entropy / max(torch.log(torch.tensor(float(n_k))).item(), 1e-9)
        chart(charts.gauge(rel, title=t("ex.gauge_entropy")), key="gauge_entropy")
    st.caption(t("ex.gauge_help", n=n_k, uniform=1 / n_k))


def heads_view(trace: Trace) -> None:
    """The layer picker, the dials, and one softmax-weights heatmap per head of that layer."""
    layer = pick_layer(trace)
    saturation(trace, layer)
    c1, c2 = st.columns(2)
    with c1:
        mode = pick_scale(max(len(trace.tokens), len(trace.key_tokens)))
    with c2:
        focus = pick_focus(trace)
    figs = panels.heads_figures(trace, selection(layer=layer, scale=mode, focus=focus))
    cells = grid(len(figs), panels.heads_per_row(trace, layer))
    for h, fig in enumerate(figs):
        with cells[h]:
            chart(fig, key=f"head_{h}", name=f"weights_L{layer}_H{h}")
