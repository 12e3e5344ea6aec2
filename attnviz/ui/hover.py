"""The lines view drawn in the browser by attnviz's own JavaScript, as a Streamlit Components v2
component: hovering a token isolates its lines with no rerun (Plotly cannot), clicking keeps it,
and the what-if knobs recompute this layer's softmax from its weights in the browser. The module
is attnviz/assets/js/attention.js, the same one the notebook widget runs (attnviz.views.widget).
"""

from __future__ import annotations

from functools import cache

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui.language import t
from attnviz.views import panels
from attnviz.views.widget import module_source, payload

NAME = "attnviz.lines"


@cache
def _component():
    return st.components.v2.component(NAME, js=module_source())


def hover_lines(trace: Trace, layer: int, heads: list[int], threshold: float) -> None:
    """One layer's lines for `heads`, hover-isolate in the browser; nothing for long inputs."""
    if not panels.lines_hover_fits(trace) or not heads:
        return
    labels = {
        "query": t("w.query"),
        "key": t("w.key"),
        "all_heads": t("lw.all_heads"),
        "temperature": t("lw.temperature"),
        "threshold": t("lw.threshold"),
        "masked": t("lw.masked"),
        "what_if": t("lw.what_if"),
        "hint": t("lw.hint"),
    }
    data = payload(trace, layers=[layer], heads_overview=False, pickers=False, labels=labels)
    data |= {"heads": [int(h) for h in heads], "layer": 0, "head": -1, "threshold": threshold}
    st.caption(t("lw.caption"))
    _component()(data=data, key="lines_live")
