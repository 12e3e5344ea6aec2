"""All heads of one layer, with two numbers that show how saturated their softmax is."""

from __future__ import annotations

import streamlit as st
import torch

from attnviz.engine.trace import Trace
from attnviz.measures import stats
from attnviz.serve.memos import per_trace
from attnviz.ui.explorer.pickers import pick_field, pick_focus, pick_layer, pick_scale, selection
from attnviz.ui.language import t
from attnviz.ui.widgets import chart, grid
from attnviz.views import panels


def saturation(trace: Trace, layer: int) -> None:
    """Two numbers, each with a bar from 0 to 1, that move when scaling, temperature or d_k
    change: HTML, not two plotly dials (each chart costs the browser ~0.1-0.3 s to draw)."""
    n_k = trace.layers[layer].n_k
    # once per trace and layer (a long input's is summed a band of rows at a time)
    top, entropy = per_trace(trace, ("saturation", layer), lambda: stats.saturation(trace, layer))
    rel = entropy / max(torch.log(torch.tensor(float(n_k))).item(), 1e-9)
    for col, value, label in zip(
        st.columns(2), (top, rel), ("ex.gauge_max", "ex.gauge_entropy"), strict=True
    ):
        with col:
            st.metric(t(label), f"{value:.3f}")
            st.progress(min(max(float(value), 0.0), 1.0))
    st.caption(t("ex.gauge_help", n=n_k, uniform=1 / n_k))


def heads_view(trace: Trace) -> None:
    """The layer picker, the two saturation numbers, and each head's softmax weights: a heatmap a
    head, or at a long input every head's picture in one chart."""
    layer = pick_layer(trace)
    field = pick_field(trace)
    saturation(trace, layer)
    c1, c2 = st.columns(2)
    with c1:
        mode = pick_scale(panels.size(trace))
    with c2:
        focus = pick_focus(trace)
    sel = selection(layer=layer, scale=mode, focus=focus, field=field)
    figs = panels.layer_heads(trace, sel)
    if len(figs) == 1 and trace.layers[layer].n_heads > 1:  # every head in one chart
        chart(figs[0], key="heads_all", name=f"{field}_L{layer}_heads")
        return
    cells = grid(len(figs), panels.heads_per_row(trace, layer))
    for h, fig in enumerate(figs):
        with cells[h]:
            chart(fig, key=f"head_{h}", name=f"{field}_L{layer}_H{h}")
