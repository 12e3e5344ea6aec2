"""Attention rollout across layers: a heatmap per layer and which inputs feed one token."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui import markup
from attnviz.ui.caching import trace_fragment
from attnviz.ui.common import chart, t
from attnviz.ui.long import pick_scale
from attnviz.views import panels as views


@trace_fragment
def rollout_view(trace: Trace, pick_layer, pick_query) -> None:
    """rollout(trace) at one layer, and the row of one token as bars."""
    n = len(trace.tokens)
    c1, c2, c3 = st.columns(3)
    with c1:
        layer = pick_layer(trace)
    with c2:
        query = pick_query(trace)
    with c3:
        st.toggle(
            t("lv.residual"), value=True, key="ro_res", help=t("lv.residual_help"),
            bind="query-params",
        )  # fmt: skip
    mode = pick_scale(n, key="ro_scale")
    try:
        heat, bars = views.rollout_figures(
            trace, t, layer, query, st.session_state.get("ro_res", True), mode
        )
    except ValueError as err:
        st.info(t("lv.rollout_refused", msg=markup.escape(err)))
        return
    chart(heat, key="rollout_map")
    chart(bars, key="rollout_bars")
    st.caption(t("lv.rollout_help"))
