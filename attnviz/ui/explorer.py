"""The views the Playground and BERT pages share: overview, head detail, one query in numbers,
outputs, head statistics. Each view is a fragment: picking a head reruns only that part."""

from __future__ import annotations

import json
import weakref

import pandas as pd
import streamlit as st
import torch

from attnviz.engine.links import default_link
from attnviz.engine.stats import heads_linking, mean_entropy, mean_max_weight
from attnviz.engine.trace import Trace
from attnviz.ui import markup
from attnviz.ui.caching import per_trace, trace_fragment
from attnviz.ui.common import (
    chart,
    grid,
    lang,
    localized,
    numbered,
    t,
    url_seed,
    url_sync,
)
from attnviz.ui.long import (
    LONG,
    pick_focus,
    pick_scale,
    pick_window,
)
from attnviz.ui.projector import on as projector_on
from attnviz.ui.projector import table as show_table
from attnviz.views import charts, frames, spec
from attnviz.views import panels as views

HEAD_MAPS_KEPT = 6  # one head's three maps kept ready per trace (short inputs only)
VIEWS = ("heads", "overview", "detail", "lines", "rollout", "query", "link", "outputs", "stats")
# Which views show a layer / head picker.
PICKS = {
    "head": {"overview", "detail", "query", "outputs"},
    "layer": {"heads", "overview", "detail", "lines", "rollout", "query", "outputs"},
}


def pick_view(default: str, views: tuple[str, ...] = VIEWS) -> str:
    url_seed("view", list(views), default)
    # Sent to the browser on every run: after a run without the explorer (an empty sentence, a
    # model that did not load) the browser remounts the picker empty unless the server sends it.
    current = st.session_state.get("view")
    st.session_state["view"] = current if current in views else default
    view = st.segmented_control(
        t("ex.view"), views, format_func=lambda v: t(f"ex.view.{v}"), key="view"
    )
    url_sync("view", default)
    return view or default


def _int_in_range(key: str, hi: int) -> None:
    if not isinstance(st.session_state.get(key), int) or not 0 <= st.session_state[key] < hi:
        st.session_state[key] = 0


def pick_layer(trace: Trace) -> int:
    if trace.n_layers == 1:
        return 0
    _int_in_range("layer", trace.n_layers)
    return st.slider(t("pg.layer"), 0, trace.n_layers - 1, key="layer", bind="query-params")


def pick_head(trace: Trace) -> int:
    if trace.n_heads == 1:
        return 0
    _int_in_range("head", trace.n_heads)
    head = st.slider(t("ex.head"), 0, trace.n_heads - 1, key="head", bind="query-params")
    _follow(st.session_state.get("layer", 0) if trace.n_layers > 1 else 0, head)
    return head


def _follow(layer: int, head: int) -> None:
    # The what-if panel above the views compares the head open here: a head picked inside a
    # fragment reruns the whole page so the panel follows (explorer() sets what it drew).
    drawn = st.session_state.get("_follow_head")
    if drawn is not None and tuple(drawn) != (layer, head):
        st.rerun(scope="app")


def pick_query(trace: Trace) -> int:
    n = len(trace.tokens)
    url_seed("query", list(range(n)), 0)
    _int_in_range("query", n)
    query = st.selectbox(t("ex.query"), range(n), format_func=numbered(trace.tokens), key="query")
    url_sync("query", 0)
    return query


def saturation(trace: Trace, layer: int) -> None:
    """Two dials that move when scaling, temperature or d_k change."""
    w = trace.layers[layer].weights  # [head, q, k]
    n_k = w.shape[-1]
    c1, c2 = st.columns(2)
    with c1:
        chart(charts.gauge(mean_max_weight(w), title=t("ex.gauge_max")), key="gauge_max")
    with c2:
        rel = mean_entropy(w) / max(torch.log(torch.tensor(float(n_k))).item(), 1e-9)
        chart(charts.gauge(rel, title=t("ex.gauge_entropy")), key="gauge_entropy")
    st.caption(t("ex.gauge_help", n=n_k, uniform=1 / n_k))


def heads_grid(trace: Trace, layer: int) -> None:
    """One softmax-weights heatmap per head of one layer; silenced heads say so in the title."""
    c1, c2 = st.columns(2)
    with c1:
        mode = pick_scale(max(len(trace.tokens), len(trace.key_tokens)))
    with c2:
        focus = pick_focus(trace)
    figs = views.heads_figures(trace, t, layer, mode, focus)
    cells = grid(len(figs), views.heads_per_row(trace, layer))
    for h, fig in enumerate(figs):
        with cells[h]:
            chart(fig, key=f"head_{h}", name=f"weights_L{layer}_H{h}")


def _mosaic_pick() -> None:
    # Runs before the rerun, so it may move the layer/head sliders to the clicked thumbnail.
    event = st.session_state.get("mosaic")
    points = event["selection"]["points"] if event else []
    if points and points[0].get("customdata") is not None:
        layer, head = points[0]["customdata"][:2]
        st.session_state["layer"], st.session_state["head"] = int(layer), int(head)


@trace_fragment
def overview(trace: Trace) -> None:
    """Every layer x head in one image; pick one to drill in."""
    shared = st.toggle(
        t("ex.shared_scale"), key="mosaic_shared", help=t("ex.shared_help"), bind="query-params"
    )
    c1, c2, c3 = st.columns(3)
    with c1:
        layer = pick_layer(trace)
    with c2:
        head = pick_head(trace)
    with c3:
        focus = pick_focus(trace)
    n = max(len(trace.tokens), len(trace.key_tokens))
    # The colour scale of the mosaic and of the chosen head below it, picked here and not below
    # the mosaic: a picker drawn after the image left its choice unset on the first run, so the
    # next head change drew (and sent) the mosaic again in another scale.
    mode = pick_scale(n, short="max")
    # Cached per trace: the same figure object when only the head changes, so the browser keeps
    # the image (Streamlit sends a reference to a message it already holds, not the image again).
    # Projector mode's page is narrower (bigger fonts, often a 1280 x 800 projector): a mosaic
    # sized for a 1920 screen left an empty band of ~300 px above and below it there.
    width = views.MOSAIC_WIDTH_PROJECTOR if projector_on() else views.MOSAIC_WIDTH
    fig = per_trace(
        trace,
        ("mosaic", shared, focus, mode, lang(), width),
        lambda: spec.as_specs(
            lambda: views.overview_figure(trace, t, shared, focus, mode, width=width)
        ),
    )
    chart(
        fig,
        key="mosaic",
        name=f"overview_{trace.n_layers}x{trace.n_heads}",
        on_select=_mosaic_pick,
        selection_mode="points",
    )
    st.caption(t("ex.overview_help"))
    st.caption(t("ex.overview_selected", l=layer, h=head))
    if focus is not None:
        st.caption(t("lv.focus_caption", token=markup.escape(trace.tokens[focus])))
    gamma = views.overview_gamma(trace, mode)
    if gamma != 1.0:
        st.caption(t("lv.mosaic_gamma", gamma=gamma))
    if n <= LONG:
        _head_triplet(trace, layer, head, shared=False, mode=mode)
        return
    # Long input: the chosen head as an image, not three maps of n x n numbers (at 512 tokens
    # ~3.3 MB on every head change; this is tens of KB). Head detail has the numbers.
    fig = views.head_image_figure(trace, t, layer, head, mode)
    chart(fig, key="overview_head", name=f"weights_L{layer}_H{head}")
    st.caption(t("ex.overview_head_help", k=-(-n // views.HEAD_IMAGE_SIDE)))
    st.button(
        t("ex.link_open", l=layer, h=head),
        on_click=_open_detail,
        args=(layer, head),
        key="overview_open",
    )


def _mark(trace: Trace) -> tuple[int, int] | None:
    """The (query, key) cell "open in Head detail" came from, kept in the URL as mark=q,k."""
    raw = st.session_state.get("mark") or st.query_params.get("mark")
    try:
        q, k = (int(x) for x in str(raw).split(","))
    except ValueError:
        return None
    return (q, k) if 0 <= q < len(trace.tokens) and 0 <= k < len(trace.key_tokens) else None


def _head_triplet(
    trace: Trace,
    layer: int,
    head: int,
    shared: bool,
    mark: tuple[int, int] | None = None,
    mode: str | None = None,
) -> None:
    """`mode`: the colour scale picked above (the overview's); None draws its own picker."""
    lt = trace.layers[layer]
    n = max(len(trace.tokens), len(trace.key_tokens))
    c1, c2 = st.columns(2)
    if mode is None:
        with c1:
            mode = pick_scale(n, short="max")
    with c2:
        lo, hi = pick_window(n)

    def build() -> list:
        return views.detail_figures(trace, t, layer, head, shared, mode, (lo, hi), mark)

    if hi - lo <= LONG:
        # Kept per trace as ready JSON: everyone who opens the page sees the same head, and
        # Head detail shows the head the overview just drew. A few per trace (~50 KB each).
        scores, logits, weights = per_trace(
            trace,
            ("head maps", layer, head, shared, mode, lo, hi, mark, lang()),
            lambda: spec.as_specs(build),
            keep=HEAD_MAPS_KEPT,
        )
    else:
        scores, logits, weights = build()
    # Short: three panels side by side. Long: the weights across the page, the scores and
    # logits below, side by side.
    if hi - lo > LONG:
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
            chart(fig, key=f"detail_{name}", name=f"{name}_L{layer}_H{head}")
    # A callable: the CSV is built only when someone downloads it, not on every rerun. Streamlit
    # keeps the callable with the session, so it holds one head's weights, not the whole trace.
    w, rows, cols = lt.head("weights", head).clone(), list(trace.tokens), list(trace.key_tokens)
    st.download_button(
        t("ex.csv_matrix"),
        lambda: frames.matrix_frame(w, rows, cols).to_csv(),
        file_name=f"weights_L{layer}_H{head}.csv",
        mime="text/csv",
        on_click="ignore",
        key="csv_matrix",
    )


@trace_fragment
def detail(trace: Trace) -> None:
    """Raw scores, the logits softmax sees, and the weights of one head, side by side."""
    c1, c2, c3 = st.columns([2, 2, 2])
    with c1:
        layer = pick_layer(trace)
    with c2:
        head = pick_head(trace)
    with c3:
        shared = st.toggle(
            t("ex.shared_scale"), key="shared", help=t("ex.shared_help"), bind="query-params"
        )
    st.caption(t("ex.detail_help"))
    mark = _mark(trace)
    if mark is not None:
        q_tok, k_tok = trace.tokens[mark[0]], trace.key_tokens[mark[1]]
        st.caption(t("ex.marked", q=markup.escape(q_tok), k=markup.escape(k_tok)))
        if st.query_params.get("mark") != f"{mark[0]},{mark[1]}":
            st.query_params["mark"] = f"{mark[0]},{mark[1]}"
    _head_triplet(trace, layer, head, shared, mark)


@trace_fragment
def one_query(trace: Trace) -> None:
    """One query against every key: q·k, × scale, exp, softmax, as numbers and a bar chart."""
    c1, c2, c3 = st.columns(3)
    with c1:
        layer = pick_layer(trace)
    with c2:
        head = pick_head(trace)
    with c3:
        query = pick_query(trace)
    lt = trace.layers[layer]
    table = frames.query_frame(trace, layer, head, query)
    st.markdown(t("ex.query_formula", scale=lt.scale))
    shown = localized(table.drop(columns=["weight (trace)"]))
    show_table(
        shown,
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.4f") for c in shown.columns[1:5]},
        key="query_table",
    )
    bars, q_vector, qk_products = views.query_figures(trace, t, layer, head, query)
    chart(bars, key="query_bars", name=f"weights_L{layer}_H{head}_query{query}")
    c1, c2 = st.columns([1, 2])
    with c1:
        chart(q_vector, key="q_vector", name=f"q_L{layer}_H{head}_query{query}")
    with c2:
        chart(qk_products, key="qk_products", name=f"qk_products_L{layer}_H{head}_query{query}")
    kv = head // (lt.n_heads // lt.n_kv_heads)
    st.caption(t("ex.qk_help", kv=kv))


def _open_detail(layer: int, head: int, query: int | None = None, key: int = 0) -> None:
    st.session_state["layer"], st.session_state["head"] = layer, head
    st.session_state["view"] = "detail"
    if query is not None:
        st.session_state["mark"] = f"{query},{key}"  # detail outlines this query row and key


def link(trace: Trace) -> None:
    """Which heads link a query token to a key token (it → animal)? Every head ranked."""
    keys = trace.key_tokens
    # Open on a real word pair ("it" → "animal"), not [CLS] → [CLS]; a URL's choice still wins.
    first_query, first_key = default_link(trace)
    url_seed("query", list(range(len(trace.tokens))), first_query)
    c1, c2 = st.columns(2)
    with c1:
        query = pick_query(trace)
        if st.query_params.get("query") != str(query):
            st.query_params["query"] = str(query)  # 0 is a choice here, not the default
    with c2:
        url_seed("link_key", list(range(len(keys))), first_key)
        if not 0 <= st.session_state["link_key"] < len(keys):
            st.session_state["link_key"] = 0
        key = st.selectbox(
            t("ex.link_key"), range(len(keys)), format_func=lambda j: f"{j}: {keys[j]}",
            key="link_key",
        )  # fmt: skip
        url_sync("link_key", first_key)
    fig = views.link_figure(trace, t, query, key)
    n_heads = trace.n_layers * trace.n_heads
    chart(fig, key="link_grid", name=f"link_query{query}_key{key}")
    top = heads_linking(trace, query, key, top=min(10, n_heads))
    uniform = 1 / len(keys)
    st.caption(t("ex.link_help", u=uniform))
    show_table(
        localized(pd.DataFrame(
            [{"layer": la, "head": h, "weight": round(w, 4), "× uniform": round(w / uniform, 1)}
             for la, h, w in top]
        )),
        hide_index=True,
        key="link_table",
    )  # fmt: skip
    best_layer, best_head, _ = top[0]
    st.button(
        t("ex.link_open", l=best_layer, h=best_head),
        on_click=_open_detail,
        args=(best_layer, best_head, query, key),
        key="link_open",
    )


@trace_fragment
def outputs(trace: Trace) -> None:
    """Per-head z and the block's output after W_O."""
    c1, c2 = st.columns(2)
    with c1:
        layer = pick_layer(trace)
    with c2:
        head = pick_head(trace)
    figs = views.outputs_figures(trace, t, layer, head)
    for col, fig, name in zip(st.columns(2), figs, ("z", "output"), strict=True):
        with col:
            chart(fig, key=name, name=f"{name}_L{layer}" + (f"_H{head}" if name == "z" else ""))
    st.caption(t("ex.outputs_help"))


def stats(trace: Trace) -> None:
    """A sortable table of every head, with CSV download."""
    table = frames.head_stats_frame(trace)
    st.caption(t("ex.stats_help"))
    shown = localized(table)
    show_table(
        shown,
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in shown.columns[2:]},
        key="stats_table",
    )
    st.download_button(
        t("ex.csv_stats"),
        lambda: table.to_csv(index=False),
        file_name="head_stats.csv",
        mime="text/csv",
        on_click="ignore",
        key="csv_stats",
    )


def export_json(trace: Trace) -> None:
    """The small JSON (sentence, knobs, weights at 3 decimals) and, only when asked, every tensor
    at float32 as .npz: both built on click, not on every rerun."""
    from attnviz.ui.common import pair, text
    from attnviz.views import export

    sentence, second = text(), pair()
    stem = f"trace_{export.slug(trace.source)}_{len(trace.tokens)}tokens"
    # Streamlit keeps these callables with the session until its next run: a weak reference lets
    # a trace leave the byte-bounded cache (a class of 30 at 512 tokens kept ~100 MB per session).
    ref = weakref.ref(trace)

    def built(export_fn):
        def build():
            alive = ref()
            if alive is None:
                return json.dumps({"error": t("serve.json_expired")}, ensure_ascii=False)
            return export_fn(alive, sentence, second)

        return build

    c1, c2 = st.columns(2)
    with c1:
        st.download_button(
            t("ex.json_trace"),
            built(export.to_json),
            file_name=f"{stem}.json",
            mime="application/json",
            on_click="ignore",
            key="json_trace",
            help=t(
                "ex.json_help", kb=export.json_bytes_estimate(trace) / 1024, n=len(trace.tokens)
            ),
        )
    with c2:
        st.download_button(
            t("ex.npz_trace"),
            built(export.to_npz),
            file_name=f"{stem}_float32.npz",
            mime="application/octet-stream",
            on_click="ignore",
            key="npz_trace",
            help=t("ex.npz_help"),
        )


def explorer(
    trace: Trace,
    default_view: str = "overview",
    views: tuple[str, ...] = VIEWS,
    follow: tuple[int, int] | None = None,
) -> str:
    """The view picker and the chosen view. Returns the view shown.

    `follow`: the (layer, head) a panel above drew for; picking another head reruns the page.
    """
    st.session_state["_follow_head"] = follow
    view = pick_view(default_view, views)
    # A view without a layer or head picker leaves the old choice in the state but not in the
    # URL: forget it, so the page (and the what-if panel above, which follows it) is what the
    # link reopens.
    stale = [k for k in ("layer", "head") if view not in PICKS[k] and st.session_state.get(k)]
    for key in stale:
        del st.session_state[key]
    if stale and follow is not None:
        st.rerun(scope="app")
    if view == "heads":
        layer = pick_layer(trace)
        saturation(trace, layer)
        heads_grid(trace, layer)
    elif view == "overview":
        overview(trace)
    elif view == "detail":
        detail(trace)
    elif view == "lines":
        from attnviz.ui.lines_view import lines_view

        lines_view(trace, pick_layer, st.session_state.get("head", 0))
    elif view == "rollout":
        from attnviz.ui.rollout_view import rollout_view

        rollout_view(trace, pick_layer, pick_query)
    elif view == "query":
        one_query(trace)
    elif view == "link":
        link(trace)
    elif view == "outputs":
        outputs(trace)
    elif view == "stats":
        stats(trace)
    export_json(trace)
    return view
