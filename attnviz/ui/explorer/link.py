"""Link two tokens: which heads put the most weight from a query token on a key token (note 004's
"it" → "animal"), every head ranked, the best one a click away in Head detail."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.measures.links import default_link
from attnviz.measures.stats import heads_linking
from attnviz.ui import markup, url
from attnviz.ui.explorer.pickers import (
    has_model,
    open_head,
    open_why,
    pick_field,
    pick_query,
    selection,
)
from attnviz.ui.language import localized, t
from attnviz.ui.widgets import chart, table
from attnviz.views import panels
from attnviz.views.tokens import shown


def link(trace: Trace) -> None:
    """Which heads link a query token to a key token (it → animal)? Every head ranked."""
    keys = trace.key_tokens
    # Open on a real word pair ("it" → "animal"), not [CLS] → [CLS]; a query picked in another
    # view (or a link's) is kept, and the key then defaults to that query's own strongest link.
    first_query, first_key = default_link(trace)
    field = pick_field(trace)
    c1, c2 = st.columns(2)
    with c1:
        query = pick_query(trace, first_query)
    with c2:
        # the key this query links to most, among the keys it may see (a decoder's: not its future)
        linked = first_key if query == first_query else default_link(trace, query)[1]
        url.seed("link_key", list(range(len(keys))), linked, follow=True)
        # a kept choice may be text: the browser sends the old label ("7: it") when a new input
        # (a pasted document) changes the options, and Streamlit hands it back unmatched
        kept = st.session_state["link_key"]
        if not isinstance(kept, int) or not 0 <= kept < len(keys):
            st.session_state["link_key"] = linked
        key = st.selectbox(
            t("ex.link_key"), range(len(keys)), format_func=lambda j: f"{j}: {keys[j]}",
            key="link_key", on_change=url.chose, args=("link_key",),
        )  # fmt: skip
        url.sync("link_key", linked)
    fig = panels.link_figure(trace, selection(query=query, key=key, field=field))
    n_heads = trace.n_layers * trace.n_heads
    chart(fig, key="link_grid", name=f"link_query{query}_key{key}")
    top = heads_linking(trace, query, key, top=min(10, n_heads), field=field)
    # uniform over the keys the row may see (a causal row at position i: i + 1 of them)
    seen = [int(lt.allowed([query])[0]) for lt in trace.layers]  # per layer
    if not all(lt.block("mask", 0, [query], [key])[0, 0] for lt in trace.layers):
        st.warning(t("ex.link_masked", q=markup.escape(shown(trace.tokens[query])),
                     k=markup.escape(shown(keys[key]))))  # fmt: skip
    help_key = "ex.link_help" if field == "weights" else "ex.link_help_moved"
    st.caption(t(help_key, u=1 / max(seen), n=max(seen)))
    table(
        localized(pd.DataFrame(
            [{"layer": la, "head": h, "weight": round(w, 4), "× uniform": round(w * seen[la], 1)}
             if field == "weights" else {"layer": la, "head": h, "moved": round(w, 4)}
             for la, h, w in top]
        )),
        hide_index=True,
        key="link_table",
    )  # fmt: skip
    best_layer, best_head, _ = top[0]
    st.button(
        t("ex.link_open", l=best_layer, h=best_head),
        on_click=open_head,
        args=(best_layer, best_head, "detail", f"{query},{key}"),  # detail outlines this cell
        key="link_open",
    )
    if has_model(trace) and trace.unit == "pieces":
        st.button(t("why.open_link", l=best_layer, h=best_head), on_click=open_why,
                  args=(best_layer, best_head, query, key), key="link_why")  # fmt: skip
