"""The information-flow graph in the explorer (attnviz.flow_graph) to the last token's prediction:
a threshold slider, the graph,
a click on a head's edge (or the picker under it) opening the head in Head detail or Head
logits, and the edges as CSV.

The graph runs the input through the model once more and reads weight rows layer by layer: a
long input takes seconds, so past a second a progress bar and a Stop button show (the Stop
click's rerun ends the run, as the atlas's does). A graph is kept on its trace; a higher
threshold is cut from a lower one's (measures.flow.prune) without running anything again.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.measures.flow import prune
from attnviz.serve.memos import per_trace
from attnviz.ui import markup, url
from attnviz.ui.explorer.pickers import open_head, selection
from attnviz.ui.explorer.writes import model_and_run
from attnviz.ui.language import t
from attnviz.ui.widgets import chart
from attnviz.views import flow, writes
from attnviz.views.tokens import shown

SHOW_AFTER = 1.0  # seconds before the progress bar and Stop button appear
KEEP = 6  # graphs kept per trace (thresholds)


def _progress():
    """A progress callback that draws a bar and a Stop button once the work passes SHOW_AFTER
    seconds; and a function that clears them."""
    start = time.perf_counter()
    drawn: dict = {}

    def step(done: float) -> None:
        if not drawn and time.perf_counter() - start < SHOW_AFTER:
            return
        if not drawn:
            drawn["bar"] = st.progress(0.0, text=t("fl.computing"))
            drawn["stop"] = st.empty()
            drawn["stop"].button(t("fl.stop"), key="fl_stop_button", icon=":material/stop:")
        drawn["bar"].progress(min(1.0, done), text=t("fl.computing"))

    def clear() -> None:
        for element in drawn.values():
            element.empty()

    return step, clear


def _graph(model, full: Trace, pos: int, tau: float) -> pd.DataFrame | None:
    """The graph from `pos` at `tau`: kept, cut from a lower threshold's, or made now (None:
    stopped)."""
    key = ("flow", pos, tau)
    made = [k for k in list(full.memo) if isinstance(k, tuple) and k[:2] == ("flow", pos)]
    lower = [k for k in made if k[2] <= tau]
    if key not in full.memo and lower:
        base = full.memo.get(max(lower, key=lambda k: k[2]))
        if base is not None:
            return per_trace(full, key, lambda: prune(base, tau), keep=KEEP)
    if st.session_state.pop("fl_stop_button", False):  # the Stop click's rerun ended the run
        st.session_state["fl_stopped"] = key
    if st.session_state.get("fl_stopped") == key and key not in full.memo:
        st.info(t("fl.stopped"))
        st.button(t("fl.again"), on_click=lambda: st.session_state.pop("fl_stopped", None),
                  key="fl_again")  # fmt: skip
        return None
    step, clear = _progress()
    sel = selection(threshold=tau)
    found = per_trace(full, key, lambda: flow.flow_table(model, full, sel, pos, step), keep=KEEP)
    clear()
    return found


def _clicked() -> None:
    # a click on a head's edge opens it in Head detail (before the rerun that draws it)
    found = writes.picked(st.session_state.get("flow_graph"))
    if found is not None:
        open_head(*found, view="detail")


def _edge_label(table: pd.DataFrame, tokens: list[str]):
    def label(i: int) -> str:
        r = table.iloc[i]
        src, dst = shown(tokens[int(r.src_pos)]), shown(tokens[int(r.dst_pos)])
        return f"L{int(r.dst_layer)} H{int(r['head'])}: {src} → {dst}  {float(r.weight):.3f}"

    return label


def _pick_edge(table: pd.DataFrame) -> None:
    """The strongest head edges in a picker, and the control that opens the head picked."""
    heads = flow.head_edges(table).head(flow.TOP)
    if heads.empty:
        st.info(t("fl.no_heads"))
        return
    options = list(range(len(heads)))
    url.seed("fl_edge", options, url.default("fl_edge"))
    if st.session_state.get("fl_edge") not in options:  # fewer edges at this threshold
        st.session_state["fl_edge"] = 0
    label = _edge_label(heads, table.attrs["tokens"])
    picked = st.selectbox(t("fl.pick"), options, format_func=label, key="fl_edge")
    url.sync("fl_edge", url.default("fl_edge"))
    row = heads.iloc[picked or 0]
    at = (int(row.dst_layer), int(row["head"]))
    st.session_state["fl_open"] = None  # an action, not a setting: never shown picked
    st.segmented_control(
        t("fl.open"), ["detail", "logits"], format_func=lambda v: t(f"ex.view.{v}"),
        key="fl_open", on_change=_open, args=at,
    )  # fmt: skip


def _open(layer: int, head: int) -> None:
    # Head logits has no layer and head pickers to write them to the link: written here, so that
    # the link names the head the panels above now follow
    view = st.session_state.get("fl_open")
    if view is None:
        return
    open_head(layer, head, view=view)
    for name in ("layer", "head"):
        url.sync(name, url.default(name))


def flow_view(trace: Trace) -> None:
    """The information-flow routes to the last token's prediction."""
    got = model_and_run(trace)
    if got is None:
        return
    model, full = got
    pos = -1  # the last token's prediction (flow_graph takes any position)
    tau = st.slider(
        t("fl.threshold"), 0.01, 0.5, url.default("fl_tau"), 0.01, format="%.2f",
        help=t("fl.threshold_help"), **url.bound("fl_tau"),
    )  # fmt: skip
    try:
        table = _graph(model, full, pos, float(tau))
    except (ValueError, TypeError) as err:  # a model whose states are no sums (BART)
        st.warning(markup.escape(err))
        return
    if table is None:
        return
    fig = flow.flow_figure(table, selection(threshold=float(tau)))
    chart(fig, key="flow_graph", name="flow_graph", on_select=_clicked, selection_mode="points")
    st.caption(t("fl.help"))
    _pick_edge(table)
    st.download_button(
        t("ex.csv_stats"), lambda: flow.csv_table(table).to_csv(index=False),
        file_name="flow_graph.csv",
        mime="text/csv", on_click="ignore", key="csv_flow",
    )  # fmt: skip
