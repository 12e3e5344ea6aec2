"""The views the Playground and BERT pages share: overview, head detail, one query in numbers,
outputs, head statistics. Each view is a fragment: picking a head reruns only that part."""

from __future__ import annotations

import json
import weakref

import streamlit as st
import torch

from attnviz import figures, frames
from attnviz.trace import Trace, heads_linking, mean_entropy, mean_max_weight, pooled_weights
from attnviz.ui.caching import per_trace
from attnviz.ui.common import chart, t, url_seed, url_sync

MOSAIC_THUMB = 48  # pixels a side of one head's thumbnail in the overview
VIEWS = ("heads", "overview", "detail", "query", "link", "outputs", "stats")


def pick_view(default: str, views: tuple[str, ...] = VIEWS) -> str:
    url_seed("view", list(views), default)
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
    return st.slider(t("ex.head"), 0, trace.n_heads - 1, key="head", bind="query-params")


def pick_query(trace: Trace) -> int:
    n = len(trace.tokens)
    url_seed("query", list(range(n)), 0)
    _int_in_range("query", n)
    query = st.selectbox(
        t("ex.query"), range(n), format_func=lambda i: f"{i}: {trace.tokens[i]}", key="query"
    )
    url_sync("query", 0)
    return query


def saturation(trace: Trace, layer: int) -> None:
    """Two dials that move when scaling, temperature or d_k change."""
    w = trace.layers[layer].weights  # [head, q, k]
    n_k = w.shape[-1]
    c1, c2 = st.columns(2)
    with c1:
        chart(figures.gauge(mean_max_weight(w), title=t("ex.gauge_max")), key="gauge_max")
    with c2:
        rel = mean_entropy(w) / max(torch.log(torch.tensor(float(n_k))).item(), 1e-9)
        chart(figures.gauge(rel, title=t("ex.gauge_entropy")), key="gauge_entropy")
    st.caption(t("ex.gauge_help", n=n_k, uniform=1 / n_k))


def heads_grid(trace: Trace, layer: int) -> None:
    """One softmax-weights heatmap per head of one layer."""
    lt = trace.layers[layer]
    per_row = min(lt.n_heads, 3)
    cols = st.columns(per_row)
    for h in range(lt.n_heads):
        fig = figures.heatmap(
            lt.weights[h],
            trace.key_tokens,
            trace.tokens,
            title=t("pg.head_title", h=h),
            value_name=t("w.weights"),
            zmin=0.0,
            zmax=1.0,
            height=380,
            show_scale=h % per_row == per_row - 1,
            x_title=t("w.key"),
            y_title=t("w.query"),
        )
        with cols[h % per_row]:
            chart(fig, key=f"head_{h}")


def _mosaic_pick() -> None:
    # Runs before the rerun, so it may move the layer/head sliders to the clicked thumbnail.
    event = st.session_state.get("mosaic")
    points = event["selection"]["points"] if event else []
    if points and points[0].get("customdata") is not None:
        layer, head = points[0]["customdata"][:2]
        st.session_state["layer"], st.session_state["head"] = int(layer), int(head)


@st.fragment
def overview(trace: Trace) -> None:
    """Every layer x head in one image; pick one to drill in."""
    shared = st.toggle(
        t("ex.shared_scale"), key="mosaic_shared", help=t("ex.shared_help"), bind="query-params"
    )
    c1, c2 = st.columns(2)
    with c1:
        layer = pick_layer(trace)
    with c2:
        head = pick_head(trace)
    # No highlight in the picture: it stays the same when only the head changes, so the browser
    # keeps it (Streamlit sends a reference to a message it already holds, not the image again).
    title = t("ex.overview_title")
    fig = per_trace(
        trace,
        ("mosaic", shared, title),
        lambda: figures.mosaic(
            pooled_weights(trace, MOSAIC_THUMB, MOSAIC_THUMB),
            thumb=MOSAIC_THUMB,
            shared_scale=shared,
            title=title,
        ),
    )
    chart(fig, key="mosaic", on_select=_mosaic_pick, selection_mode="points")
    st.caption(t("ex.overview_help"))
    st.caption(t("ex.overview_selected", l=layer, h=head))
    _head_triplet(trace, layer, head, shared=False)


def _head_triplet(trace: Trace, layer: int, head: int, shared: bool) -> None:
    lt = trace.layers[layer]
    logits = lt.logits()  # [head, q, k]
    finite = logits[torch.isfinite(logits)]
    bound_scores = float(lt.scores.abs().max()) if shared else None
    bound_logits = float(finite.abs().max()) if shared and finite.numel() else None
    common = dict(height=420, x_title=t("w.key"), y_title=t("w.query"))
    c1, c2, c3 = st.columns(3)
    with c1:
        fig = figures.heatmap(
            lt.scores[head],
            trace.key_tokens,
            trace.tokens,
            title=t("w.scores"),
            value_name="q·k",
            signed=True,
            zmin=None if bound_scores is None else -bound_scores,
            zmax=bound_scores,
            **common,
        )
        chart(fig, key="detail_scores")
    with c2:
        fig = figures.heatmap(
            logits[head],
            trace.key_tokens,
            trace.tokens,
            title=t("w.logits") + f" · × {lt.scale:.4g}",
            value_name="logit",
            signed=True,
            zmin=None if bound_logits is None else -bound_logits,
            zmax=bound_logits,
            show_y_labels=False,
            **common,
        )
        chart(fig, key="detail_logits")
    with c3:
        fig = figures.heatmap(
            lt.weights[head],
            trace.key_tokens,
            trace.tokens,
            title=t("w.weights"),
            value_name=t("w.weights"),
            zmin=0.0,
            zmax=1.0 if shared else None,
            show_y_labels=False,
            **common,
        )
        chart(fig, key="detail_weights")
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


@st.fragment
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
    _head_triplet(trace, layer, head, shared)


@st.fragment
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
    st.dataframe(
        table.drop(columns=["weight (trace)"]),
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.4f") for c in table.columns[1:5]},
        key="query_table",
    )
    chart(
        figures.bars(
            lt.weights[head, query],
            trace.key_tokens,
            title=t("ex.query_bars", token=trace.tokens[query]),
            highlight=query if not trace.is_cross else None,
        ),
        key="query_bars",
    )
    kv = head // (lt.n_heads // lt.n_kv_heads)
    q = lt.q[head, query]  # [d_head]
    k = lt.k[kv]  # [k, d_head]
    dims = [str(i) for i in range(q.shape[0])]
    c1, c2 = st.columns([1, 2])
    with c1:
        fig = figures.heatmap(
            q.unsqueeze(0),
            dims,
            [trace.tokens[query]],
            title=t("ex.q_vector"),
            value_name="q",
            signed=True,
            height=200,
            max_ticks=8,
            x_title="dim",
            y_title=t("w.query"),
        )
        chart(fig, key="q_vector")
    with c2:
        fig = figures.heatmap(
            k * q,  # [k, d_head]: each row sums to that key's q·k
            dims,
            trace.key_tokens,
            title=t("ex.qk_products"),
            value_name="q_i·k_i",
            signed=True,
            height=max(260, 22 * k.shape[0]),
            max_ticks=16,
            x_title="dim",
            y_title=t("w.key"),
        )
        chart(fig, key="qk_products")
    st.caption(t("ex.qk_help", kv=kv))


def _open_detail(layer: int, head: int) -> None:
    st.session_state["layer"], st.session_state["head"] = layer, head
    st.session_state["view"] = "detail"


def link(trace: Trace) -> None:
    """Which heads link a query token to a key token (it → animal)? Every head ranked."""
    keys = trace.key_tokens
    c1, c2 = st.columns(2)
    with c1:
        query = pick_query(trace)
    with c2:
        url_seed("link_key", list(range(len(keys))), 0)
        if not 0 <= st.session_state["link_key"] < len(keys):
            st.session_state["link_key"] = 0
        key = st.selectbox(
            t("ex.link_key"), range(len(keys)), format_func=lambda j: f"{j}: {keys[j]}",
            key="link_key",
        )  # fmt: skip
        url_sync("link_key", 0)
    grid = trace.weights()[:, :, query, key]  # [layer, head]
    fig = figures.heatmap(
        grid,
        [f"H{h}" for h in range(grid.shape[1])],
        [f"L{la}" for la in range(grid.shape[0])],
        title=t("ex.link_title", q=trace.tokens[query], k=keys[key]),
        value_name=t("w.weights"),
        zmin=0.0,
        zmax=max(float(grid.max()), 1e-6),
        show_values=grid.numel() <= 400,
        height=90 + 34 * grid.shape[0],
        x_title=t("ex.head"),
        y_title=t("pg.layer"),
    )
    fig.update_xaxes(tickangle=0)
    chart(fig, key="link_grid")
    top = heads_linking(trace, query, key, top=min(10, grid.numel()))
    uniform = 1 / len(keys)
    st.caption(t("ex.link_help", u=uniform))
    st.dataframe(
        [{"layer": la, "head": h, "weight": round(w, 4), "× uniform": round(w / uniform, 1)}
         for la, h, w in top],
        hide_index=True,
        key="link_table",
    )  # fmt: skip
    best_layer, best_head, _ = top[0]
    st.button(
        t("ex.link_open", l=best_layer, h=best_head),
        on_click=_open_detail,
        args=(best_layer, best_head),
        key="link_open",
    )


@st.fragment
def outputs(trace: Trace) -> None:
    """Per-head z and the block's output after W_O."""
    c1, c2 = st.columns(2)
    with c1:
        layer = pick_layer(trace)
    with c2:
        head = pick_head(trace)
    lt = trace.layers[layer]
    panels = (
        (lt.z[head], t("ex.z_title", h=head), "z"),
        (lt.output, t("ex.output_title"), "output"),
    )
    for col, (matrix, title, name) in zip(st.columns(2), panels, strict=True):
        with col:
            fig = figures.vectors(
                matrix, trace.tokens, title=title, value_name=name, y_title=t("w.query")
            )
            chart(fig, key=name)
    st.caption(t("ex.outputs_help"))


def stats(trace: Trace) -> None:
    """A sortable table of every head, with CSV download."""
    table = frames.head_stats_frame(trace)
    st.caption(t("ex.stats_help"))
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format="%.3f") for c in table.columns[2:]},
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
    # Streamlit keeps this callable with the session until its next run: a weak reference lets a
    # trace leave the byte-bounded cache (a class of 30 at 512 tokens kept ~100 MB per session).
    ref = weakref.ref(trace)

    def build() -> str:
        alive = ref()
        if alive is None:
            return json.dumps({"error": t("serve.json_expired")}, ensure_ascii=False)
        return json.dumps(frames.trace_to_dict(alive), ensure_ascii=False)

    st.download_button(
        t("ex.json_trace"),
        build,
        file_name="attnviz_trace.json",
        mime="application/json",
        on_click="ignore",
        key="json_trace",
    )


def explorer(trace: Trace, default_view: str = "overview", views: tuple[str, ...] = VIEWS) -> str:
    """The view picker and the chosen view. Returns the view shown."""
    view = pick_view(default_view, views)
    if view == "heads":
        layer = pick_layer(trace)
        saturation(trace, layer)
        heads_grid(trace, layer)
    elif view == "overview":
        overview(trace)
    elif view == "detail":
        detail(trace)
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
