"""The downloads under every view: a small JSON to share, every tensor as .npz for research."""

from __future__ import annotations

import json
import weakref

import streamlit as st

from attnviz.engine.budget import size as budget_size
from attnviz.engine.trace import Trace
from attnviz.serve.memos import per_trace
from attnviz.ui.language import t
from attnviz.ui.sidebar import pair, text
from attnviz.ui.widgets import EXACT
from attnviz.views import export


def export_json(trace: Trace) -> None:
    """The small JSON (sentence, knobs, weights at 3 decimals) and, only when asked, every tensor
    at float32 as .npz: both built on click, not on every rerun."""
    if not export.exportable(trace):
        st.caption(t("long.no_export"))
        return
    sentence, second = text(), pair()
    stem = f"trace_{export.slug(trace.source)}_{len(trace.tokens)}tokens"
    # Streamlit keeps these callables with the session until its next run: a weak reference lets
    # a trace leave the byte-bounded cache (a class of 30 at 512 tokens kept ~100 MB per session).
    ref = weakref.ref(trace)

    def built(export_fn, **options):
        def build():
            alive = ref()
            if alive is None:
                return json.dumps({"error": t("serve.json_expired")}, ensure_ascii=False)
            return export_fn(alive, sentence, second, **options)

        return build

    pick = _json_pick(trace)
    size = per_trace(trace, ("json bytes", pick), lambda: export.json_bytes(trace, pick))
    c1, c2 = st.columns(2)
    with c1:
        st.download_button(
            t("ex.json_trace_size", size=budget_size(size)),
            built(export.to_json, pick=pick),
            file_name=f"{stem}.json",
            mime="application/json",
            on_click="ignore",
            key="json_trace",
            help=t("ex.json_help", kb=size / 1024, n=len(trace.tokens)),
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


def _json_pick(trace: Trace) -> export.Pick:
    """What the JSON holds (export.Pick), chosen in a popover: the layers, the heads and the
    weight below which a weight is left out; the default keeps a long input's file under 10 MB."""
    default = per_trace(trace, ("json pick",), lambda: export.default_pick(trace))
    with st.popover(t("ex.json_pick")):
        layers = st.multiselect(t("ex.json_layers"), range(trace.n_layers), key="json_layers",
                                placeholder=t("ex.json_all"), **EXACT)  # fmt: skip
        heads = st.multiselect(t("ex.json_heads"), range(trace.n_heads), key="json_heads",
                               placeholder=t("ex.json_all"), **EXACT)  # fmt: skip
        threshold = st.number_input(
            t("ex.json_threshold"), 0.0, 1.0, value=default.threshold, step=0.001,
            format="%.3f", key=f"json_threshold_{default.threshold}",
            help=t("ex.json_threshold_help"),
        )  # fmt: skip
    return export.Pick(tuple(layers) or None, tuple(heads) or None, float(threshold))
