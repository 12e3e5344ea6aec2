"""Attention rollout across layers: a heatmap per layer and which inputs feed one token."""

from __future__ import annotations

import streamlit as st

from attnviz import figures
from attnviz.rollout import rollout
from attnviz.trace import Trace
from attnviz.ui.common import chart, t
from attnviz.ui.long import colour_kwargs, pick_scale


@st.fragment
def rollout_view(trace: Trace, pick_layer, pick_query) -> None:
    """rollout(trace) at one layer, and the row of one token as bars."""
    try:
        rolled = rollout(trace, residual=st.session_state.get("ro_res", True))  # [layer, q, k]
    except ValueError as err:
        st.info(t("lv.rollout_refused", msg=err))
        return
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
    matrix = rolled[layer]  # [q, k]
    fig = figures.heatmap(
        matrix,
        trace.key_tokens,
        trace.tokens,
        title=t("lv.rollout_title", l=layer),
        value_name=t("lv.rollout_value"),
        height=min(900, max(420, 12 * n + 160)) if n > 24 else 460,
        x_title=t("lv.input_token"),
        y_title=t("w.query"),
        highlight_row=query,
        auto_ticks=True,
        **colour_kwargs(matrix, mode, t("lv.rollout_value")),
    )
    chart(fig, key="rollout_map")
    bars = figures.bars(
        matrix[query],
        trace.key_tokens,
        title=t("lv.rollout_bars", token=trace.tokens[query], l=layer),
        value_name=t("lv.rollout_value"),
        highlight=query,
        auto_ticks=True,
        height=340,
    )
    if mode == "log":  # the same reading as the map: small shares stay visible
        bars.update_yaxes(type="log")
    chart(bars, key="rollout_bars")
    st.caption(t("lv.rollout_help"))
