"""The views made of numbers: one query against every key, one head's z and the block's output,
and a sortable table of every head's statistics."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.serve.memos import per_trace
from attnviz.ui.caching import trace_fragment
from attnviz.ui.explorer.pickers import (
    layer_and_head,
    passing,
    pick_field,
    pick_query,
    selection,
)
from attnviz.ui.language import localized, t
from attnviz.ui.widgets import chart, table
from attnviz.views import frames, panels

TOP_KEYS = 16  # One query's table at a long input: the keys with the largest weights


@trace_fragment
def one_query(trace: Trace) -> None:
    """One query against every key: q·k, × scale, exp, softmax, as numbers and a bar chart."""
    layer, head, column = layer_and_head(trace, third=True)
    with column:
        query = pick_query(trace)
    lt = trace.layers[layer]
    steps = frames.query_frame(trace, layer, head, query)
    st.markdown(t("ex.query_formula", scale=lt.scale))
    steps = steps.drop(columns=["weight (trace)"])
    n, long = len(steps), panels.query_table_is_top(trace)
    if long:  # the keys that matter, sorted; every key in the bars below and in the CSV
        top = steps.sort_values("softmax", ascending=False).head(TOP_KEYS)
        shown = localized(top.assign(allowed=top["allowed"].map({True: "✓", False: "–"})))
        st.caption(t("ex.query_top", top=TOP_KEYS, n=n))
    else:
        shown = localized(steps)
    formats = {c: st.column_config.NumberColumn(format="%.4f") for c in shown.columns[1:5]}
    # a long input's few rows as an HTML table: drawn once, where the canvas table drew a
    # second time after the page settled (its last change, ~0.3 s after the charts at 512)
    table(shown, hide_index=True, width="stretch", column_config=formats, key="query_table",
          wrap=long)  # fmt: skip
    if long:
        st.download_button(
            t("ex.csv_query", n=n),
            lambda: steps.to_csv(index=False),
            file_name=f"query_L{layer}_H{head}_q{query}.csv",
            mime="text/csv",
            on_click="ignore",
            key="csv_query",
        )
    figs = panels.query_figures(trace, selection(layer=layer, head=head, query=query))
    bars, q_vector, qk_products = figs
    chart(bars, key="query_bars", name=f"weights_L{layer}_H{head}_query{query}")
    c1, c2 = st.columns([1, 2])
    with c1:
        chart(q_vector, key="q_vector", name=f"q_L{layer}_H{head}_query{query}")
    with c2:
        chart(qk_products, key="qk_products", name=f"qk_products_L{layer}_H{head}_query{query}")
    kv = lt.kv_head(head)
    st.caption(t("ex.qk_help", kv=kv))


@trace_fragment
def outputs(trace: Trace) -> None:
    """Per-head z and the block's output after W_O."""
    layer, head, _ = layer_and_head(trace)
    figs = panels.outputs_figures(trace, selection(layer=layer, head=head))
    for col, fig, name in zip(st.columns(2), figs, ("z", "output"), strict=True):
        with col:
            chart(fig, key=name, name=f"{name}_L{layer}" + (f"_H{head}" if name == "z" else ""))
    st.caption(t("ex.outputs_help"))


def stats(trace: Trace) -> None:
    """A sortable table of every head, with CSV download."""
    field = pick_field(trace)
    # Once per trace: a long input's statistics recompute every head's weights, band by band.
    with passing(trace, field):
        heads = per_trace(
            trace, ("head stats", field), lambda: frames.head_stats_frame(trace, field)
        )
    st.caption(t("ex.stats_help") + (" " + t("ex.stats_moved") if field == "moved" else ""))
    if "moved_punct" in heads:  # the Kobayashi shares (on special only where there are some)
        st.caption(t("ex.stats_kobayashi"))
    first = ["layer", "head"]
    if field == "moved":  # the Kobayashi shares first: on a laptop the table scrolls sideways
        first += [c for c in heads if c.startswith(("weights_", "moved_"))]
    shown = localized(heads[first + [c for c in heads if c not in first]])
    table(
        shown,
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in shown.columns[2:]},
        key="stats_table",
    )
    if not any(trace.special.values()):
        st.caption(t("ex.stats_no_special"))
    st.download_button(
        t("ex.csv_stats"),
        lambda: heads.to_csv(index=False),
        file_name="head_stats.csv" if field == "weights" else "head_stats_moved.csv",
        mime="text/csv",
        on_click="ignore",
        key="csv_stats",
    )
