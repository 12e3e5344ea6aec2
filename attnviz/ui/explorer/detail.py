"""Head detail: one head's raw scores, the logits softmax sees and its weights, side by side (on a
long input, a window of positions), with its weights as CSV."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.serve.memos import per_trace
from attnviz.ui import markup, url
from attnviz.ui.caching import trace_fragment
from attnviz.ui.explorer.pickers import (
    default_query,
    has_model,
    layer_and_head,
    open_why,
    pick_field,
    pick_scale,
    pick_window,
    selection,
)
from attnviz.ui.language import t
from attnviz.ui.widgets import chart, trace_legend
from attnviz.views import frames, panels, spec
from attnviz.views.tokens import shown

HEAD_MAPS_KEPT = 6  # one head's three maps kept ready per trace (short inputs only)


MARK_SOURCES = ("link", "atlas")  # where an outlined cell came from: mark=q,k[,source]


def _mark(trace: Trace) -> tuple[int, int, str] | None:
    """The (query, key) cell "open in Head detail" came from and where that was (Link two tokens,
    the default, or the Head atlas), kept in the URL as mark=q,k or mark=q,k,atlas."""
    parts = str(st.session_state.get("mark") or url.read("mark")).split(",")
    source = parts.pop() if len(parts) == 3 else "link"
    try:
        q, k = (int(x) for x in parts)
    except ValueError:  # not two numbers
        return None
    if source not in MARK_SOURCES:
        return None
    inside = 0 <= q < len(trace.tokens) and 0 <= k < len(trace.key_tokens)
    return (q, k, source) if inside else None


def head_maps(
    trace: Trace,
    layer: int,
    head: int,
    shared: bool,
    mark: tuple[int, int] | None = None,
    mode: str | None = None,
    field: str = "weights",
) -> None:
    """The three maps of one head (its weights or moved the third; a trace of words has that
    one alone) and its CSV. `mode`: the colour scale picked above (the overview's); None draws
    its own picker."""
    n = panels.size(trace)
    lo, hi = 0, n
    if mode is None or panels.needs_window(n):  # a row of pickers only when there is one to draw
        c1, c2 = st.columns(2)
        if mode is None:
            with c1:
                mode = pick_scale(n, short="max")
        with c2:
            lo, hi = pick_window(n)
    sel = selection(
        layer=layer, head=head, shared=shared, scale=mode, window=(lo, hi), mark=mark, field=field
    )

    def build() -> list:
        return panels.detail_figures(trace, sel)

    def build_specs() -> list:
        with spec.making_specs():
            return build()

    stacked = panels.detail_stacked((lo, hi))
    if trace.unit != "pieces":  # words: their weights or moved only (no scores)
        chart(build()[0], key="detail_weights", name=f"{field}_L{layer}_H{head}")
        trace_legend(trace)
        _csv(trace, layer, head, (lo, hi), field)
        return
    if not stacked:
        # Kept per trace as ready JSON: everyone who opens the page sees the same head, and
        # Head detail shows the head the overview just drew. A few per trace (~50 KB each).
        scores, logits, weights = per_trace(
            trace, ("head maps", sel), build_specs, keep=HEAD_MAPS_KEPT
        )
    else:
        scores, logits, weights = build()
    # Short: three panels side by side. Long: the weights across the page, the scores and
    # logits below, side by side.
    if stacked:
        weights_col = st.container()
        c1, c2 = st.columns(2)
    else:
        c1, c2, weights_col = st.columns(3)
    for col, fig, name in (
        (c1, scores, "scores"),
        (c2, logits, "logits"),
        (weights_col, weights, "weights"),
    ):
        with col:
            drawn = field if name == "weights" else name
            chart(fig, key=f"detail_{name}", name=f"{drawn}_L{layer}_H{head}")
    trace_legend(trace)
    _csv(trace, layer, head, (lo, hi), field)


def _csv(trace: Trace, layer: int, head: int, window: tuple[int, int], field: str) -> None:
    # A callable: the CSV is built only when someone downloads it, not on every rerun. Streamlit
    # keeps the callable with the session, so it holds one head's weights, not the whole trace.
    w, rows, cols = frames.head_weights(trace, layer, head, window, field)
    st.download_button(
        t("ex.csv_matrix"),
        lambda: frames.matrix_frame(w, rows, cols, field).to_csv(),
        file_name=f"{field}_L{layer}_H{head}.csv",
        mime="text/csv",
        on_click="ignore",
        key="csv_matrix",
    )


@trace_fragment
def detail(trace: Trace) -> None:
    """Raw scores, the logits softmax sees, and the weights of one head, side by side."""
    field = pick_field(trace)
    layer, head, column = layer_and_head(trace, third=True)
    with column:
        shared = st.toggle(
            t("ex.shared_scale"), value=url.default("shared"), help=t("ex.shared_help"),
            **url.bound("shared"),
        )  # fmt: skip
    if trace.unit != "pieces":  # words keep no scores: one map, said so
        help_key = "ex.detail_help_chars" if trace.unit == "char" else "ex.detail_help_words"
        st.caption(t(help_key, field=t(f"ex.field.{field}")))
    else:
        st.caption(t("ex.detail_help" if field == "weights" else "ex.detail_help_moved"))
    marked = _mark(trace)
    mark = None
    if marked is not None:
        q, k, source = marked
        mark = (q, k)
        q_tok, k_tok = trace.tokens[q], trace.key_tokens[k]
        st.caption(
            t(f"ex.marked.{source}", q=markup.escape(shown(q_tok)), k=markup.escape(shown(k_tok)))
        )
        url.write("mark", f"{q},{k}" + ("" if source == "link" else f",{source}"))
    head_maps(trace, layer, head, shared, mark, field=field)
    if has_model(trace) and trace.unit == "pieces":
        _why_button(trace, layer, head, mark)


def _why_button(trace: Trace, layer: int, head: int, mark: tuple[int, int] | None) -> None:
    """Why here on the outlined cell, else on the query picked in the views (a decoder's last
    token by default) and the key this head weighs most there."""
    if mark is None:
        query = st.session_state.get("query", url.read("query"))
        n = len(trace.tokens)
        query = query if isinstance(query, int) and 0 <= query < n else default_query(trace)
        key = int(trace.layers[layer].block("weights", head, [query])[0].argmax())
        mark = (query, key)
    q, k = mark
    label = t("why.open") + f" ({shown(trace.tokens[q])} → {shown(trace.key_tokens[k])})"
    st.button(markup.escape(label), on_click=open_why, args=(layer, head, q, k), key="detail_why")
