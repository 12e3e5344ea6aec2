"""Why here: one head's logit at a (query, key) cell split into what the query and the key carry,
as a map of query-side x key-side parts, the ranked pairs, one sentence, and the row's strongest
keys each split by its key-side parts (a click on a bar splits that key)."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.serve.memos import per_trace
from attnviz.ui import markup, url
from attnviz.ui.explorer.pickers import layer_and_head, pick_query, selection
from attnviz.ui.explorer.writes import model_and_run
from attnviz.ui.language import t
from attnviz.ui.widgets import chart
from attnviz.views import why
from attnviz.views.tokens import shown

KEPT = 8  # splits kept per trace (a few cells a student clicks through)
AUTO = -1  # the key picker's "the key this head weighs most"


def _keys(trace: Trace, layer: int, head: int, query: int) -> tuple[list[int], int]:
    """The keys the row may see at this head, and the one it weighs most."""
    lt = trace.layers[layer]
    seen = lt.block("mask", head, [query])[0].nonzero().reshape(-1).tolist()
    best = int(lt.block("weights", head, [query])[0].argmax())
    return seen, best


def _picked_key(key: str) -> None:
    # a click on a key's bar splits that key (before the rerun that draws it)
    points = (st.session_state.get(key) or {}).get("selection", {}).get("points", [])
    for point in points:
        data = point.get("customdata")
        if isinstance(data, list) and data:
            st.session_state["why_key"] = int(data[0])
            url.chose("why_key")
            return


def pick_key(trace: Trace, seen: list[int], best: int) -> int:
    """The key: the head's strongest (AUTO, the default) or any the row may see."""
    keys = trace.key_tokens
    options = [AUTO, *seen]
    url.seed("why_key", options, AUTO)
    if st.session_state.get("why_key") not in options:
        st.session_state["why_key"] = AUTO

    def label(j: int) -> str:
        if j == AUTO:
            return t("why.key_default", j=best, tok=shown(keys[best]))
        return f"{j}: {shown(keys[j])}"

    chosen = st.selectbox(t("why.key_pick"), options, format_func=label, key="why_key",
                          on_change=url.chose, args=("why_key",))  # fmt: skip
    url.sync("why_key", AUTO)
    return best if chosen == AUTO else int(chosen)


def why_view(trace: Trace) -> None:
    """The split of one cell's logit, and of the row's strongest keys."""
    got = model_and_run(trace, head=False)
    if got is None:
        return
    model, full = got
    layer, head, _ = layer_and_head(trace)
    c1, c2 = st.columns(2)
    with c1:
        query = pick_query(trace)
    seen, best = _keys(trace, layer, head, query)
    with c2:
        key = pick_key(trace, seen, best)
    st.caption(t("why.help"))
    sel = selection(layer=layer, head=head, query=query, key=key)
    try:
        with st.spinner():
            table = per_trace(full, ("why", sel.lang, layer, head, query, key),
                              lambda: why.why_table(model, full, sel, key), keep=KEPT)  # fmt: skip
            keys = per_trace(full, ("why keys", layer, head, query, key),
                             lambda: why.keys_table(model, full, sel), keep=KEPT)  # fmt: skip
    except ValueError as err:
        st.warning(t("why.masked") if "may not attend" in str(err) else markup.escape(err))
        return
    st.markdown(markup.escape(why.sentence(table, sel)))
    c1, c2 = st.columns(2)
    with c1:
        chart(
            why.map_figure(table, sel), key="why_map", name=f"why_L{layer}H{head}_q{query}_k{key}"
        )
    with c2:
        chart(why.pairs_figure(table, sel), key="why_pairs", name=f"why_pairs_L{layer}H{head}")
    name = f"why_keys_L{layer}H{head}_q{query}"
    chart(why.keys_figure(keys, sel, key), key="why_keys", name=name,
          on_select=lambda: _picked_key("why_keys"), selection_mode="points")  # fmt: skip
    st.caption(t("why.keys_help"))
    columns = ["q_part", "k_part", "q_kind", "q_layer", "q_head", "k_kind", "k_layer", "k_head",
               "score", "share"]  # fmt: skip
    st.download_button(
        t("why.csv"), lambda: table[columns].to_csv(index=False),
        file_name=f"why_L{layer}H{head}_q{query}_k{key}.csv", mime="text/csv",
        on_click="ignore", key="csv_why",
    )  # fmt: skip
