"""The lines view: BertViz's head view, with a threshold, focus, layouts and windows."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui import url
from attnviz.ui.caching import trace_fragment
from attnviz.ui.explorer.pickers import pick_field, pick_layer, pick_window
from attnviz.ui.language import t
from attnviz.ui.widgets import EXACT, chart, trace_legend
from attnviz.views import panels
from attnviz.views.lines import LinesLook, LinesPick, is_cjk, layer_lines
from attnviz.views.tokens import shown

PAIRS = url.key("lines_pair").options


def _focus_options(trace: Trace) -> list[str]:
    return ["", *(f"q{i}" for i in range(len(trace.tokens)))] + [
        f"k{j}" for j in range(len(trace.key_tokens))
    ]


def _focus_labels(trace: Trace):
    # Over the token lists, not the trace: Streamlit keeps a format_func with the session.
    sides = {"q": list(map(shown, trace.tokens)), "k": list(map(shown, trace.key_tokens))}

    def label(value: str) -> str:
        if not value:
            return t("lv.focus_none")
        side, pos = value[0], int(value[1:])
        return t(f"lv.focus_{side}", i=pos, token=sides[side][pos])

    return label


def _clicked() -> None:
    # Runs before the rerun: a click on a token marker isolates its lines; a second click clears.
    event = st.session_state.get("lines_chart")
    points = event["selection"]["points"] if event else []
    for point in points:
        data = point.get("customdata")
        if isinstance(data, list) and len(data) >= 2 and data[0] in ("q", "k"):
            value = f"{data[0]}{int(data[1])}"
            same = st.session_state.get("lines_focus") == value
            st.session_state["lines_focus"] = "" if same else value
            return


def _sentence_ranges(trace: Trace, which: str) -> tuple[tuple[int, int] | None, ...]:
    """Query and key ranges for a BERT sentence pair (A = token type 0, B = 1)."""
    types = trace.token_types or []
    if which == "all" or 1 not in types:
        return None, None
    b = types.index(1)
    n = len(trace.tokens)
    a_range, b_range = (0, b), (b, n)
    pick = {"ab": (a_range, b_range), "ba": (b_range, a_range)}
    pick |= {"aa": (a_range, a_range), "bb": (b_range, b_range)}
    return pick[which]


@trace_fragment
def lines_view(trace: Trace, head_default: int = 0) -> None:
    """Query tokens on the left, keys on the right (or two rows), a line per pair above w."""
    n = panels.size(trace)
    field = pick_field(trace)
    c1, c2, c3 = st.columns([1, 2, 1])
    with c1:
        layer = pick_layer(trace)
    with c2:
        heads_all = list(range(trace.n_heads))
        first = [min(head_default, trace.n_heads - 1)]
        chosen = st.session_state.get("lines_heads")
        if not chosen or not set(chosen) <= set(heads_all):
            # Set as state, not as the widget's default: the URL then always carries the heads
            # (a bound widget leaves its default out, and this default depends on the view before).
            # No head at all is not a choice either (an empty chart, and a link without the key).
            st.session_state["lines_heads"] = first
        # plain numbers as options: the URL then reads ?lines_heads=0&lines_heads=4 in any language
        heads = st.multiselect(t("lv.heads"), heads_all, **EXACT, **url.bound("lines_heads"))
    with c3:
        threshold = st.slider(
            t("lv.threshold"), 0.0, 0.5, url.default("lines_w", n=n), 0.005,
            help=t("lv.threshold_help"), format="%.3f", **url.bound("lines_w"),
        )  # fmt: skip
    d1, d2, d3 = st.columns([2, 1, 1])
    with d1:
        options = _focus_options(trace)
        url.seed("lines_focus", options, url.default("lines_focus"))
        if st.session_state.get("lines_focus") not in options:
            st.session_state["lines_focus"] = ""
        focus_value = st.selectbox(
            t("lv.focus"), options, format_func=_focus_labels(trace),
            key="lines_focus", help=t("lv.lines_focus_help"),
        )  # fmt: skip
        url.sync("lines_focus", url.default("lines_focus"))
    with d2:
        rows = st.toggle(
            t("lv.rows"), value=url.default("lines_rows", cjk=is_cjk(trace.tokens)),
            help=t("lv.rows_help"), **url.bound("lines_rows"),
        )  # fmt: skip
    with d3:
        pair = "all"
        if trace.token_types and 1 in trace.token_types:
            url.seed("lines_pair", list(PAIRS), url.default("lines_pair"))
            pair = st.selectbox(
                t("lv.pair"), PAIRS, format_func=lambda p: t(f"lv.pair.{p}"), key="lines_pair"
            )
            url.sync("lines_pair", url.default("lines_pair"))
    q_range, k_range = _sentence_ranges(trace, pair)
    if not trace.is_cross and q_range is None:
        window = pick_window(n)  # (0, n) where the views need no window
        if window != (0, n):
            q_range = k_range = window
    if not heads:
        st.info(t("lv.no_heads"))
        return
    focus = (focus_value[0], int(focus_value[1:])) if focus_value else None
    pick = LinesPick(tuple(heads), threshold, focus, q_range, k_range)
    look = LinesLook(
        rows, 1100 if rows else None, t("w.query"), t("w.key"), t("ex.head"),
        t("lv.lines_title_rows" if rows else "lv.lines_title", l=layer),
    )  # fmt: skip
    fig = layer_lines(trace, layer, pick, look, field)
    chart(fig, key="lines_chart", on_select=_clicked, selection_mode="points")
    trace_legend(trace)
    trace_legend(trace)
    st.caption(t("lv.lines_help", lines=fig.layout.meta["lines"], w=threshold))
    if field == "moved":  # the browser's lines below redraw the weights: not for moved
        st.caption(t("lv.moved_help"))
        return
    from attnviz.ui.hover import hover_lines  # the same lines in attnviz's own JS: hover isolates

    hover_lines(trace, layer, heads, threshold)
