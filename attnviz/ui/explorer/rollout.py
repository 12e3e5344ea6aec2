"""Attention rollout across layers: a heatmap per layer and which inputs feed one token."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui import markup, url
from attnviz.ui.caching import trace_fragment
from attnviz.ui.explorer.pickers import pick_layer, pick_query, pick_scale, selection
from attnviz.ui.language import said, t
from attnviz.ui.widgets import chart
from attnviz.views import panels


@trace_fragment
def rollout_view(trace: Trace) -> None:
    """rollout(trace) at one layer, and the row of one token as bars."""
    n = len(trace.tokens)
    c1, c2, c3 = st.columns(3)
    with c1:
        layer = pick_layer(trace)
    with c2:
        query = pick_query(trace)
    with c3:
        residual = st.toggle(
            t("lv.residual"), value=url.default("ro_res"), help=t("lv.residual_help"),
            **url.bound("ro_res"),
        )  # fmt: skip
    mode = pick_scale(n, key="ro_scale")
    try:
        sel = selection(layer=layer, query=query, scale=mode)
        heat, bars = panels.rollout_figures(trace, sel, residual)
    except ValueError as err:
        st.info(t("lv.rollout_refused", msg=markup.escape(said(err))))
        return
    chart(heat, key="rollout_map")
    chart(bars, key="rollout_bars")
    st.caption(t("lv.rollout_help"))
