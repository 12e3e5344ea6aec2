"""The downloads under every view: a small JSON to share, every tensor as .npz for research."""

from __future__ import annotations

import json
import weakref

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui.language import t
from attnviz.ui.sidebar import pair, text
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
