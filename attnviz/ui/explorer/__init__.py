"""The views the Playground and the model page share: a view picker and the chosen view.

The views are attnviz.views.registry's; here each gets its drawer, the widgets around its figures,
one module a view: heads (all heads of a layer), overview, detail (Head detail), lines, rollout,
numbers (One query, Outputs, head statistics), link (Link two tokens), writes (each head's push
on a token's logit, the logit lens), compare (two texts), flow (the information-flow graph),
patch (does a head matter: activation patching), why (a logit split into what query and key
carry); pickers holds the pickers and the one place that moves the layer and head; export the
downloads under every view. Most views that have pickers are fragments: picking a head reruns
only that part of the page.
"""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.serve import memos
from attnviz.ui.explorer.compare import compare_view
from attnviz.ui.explorer.detail import detail
from attnviz.ui.explorer.export import export_json
from attnviz.ui.explorer.flow import flow_view
from attnviz.ui.explorer.heads import heads_view
from attnviz.ui.explorer.lines import lines_view
from attnviz.ui.explorer.link import link
from attnviz.ui.explorer.numbers import one_query, outputs, stats
from attnviz.ui.explorer.overview import overview
from attnviz.ui.explorer.patch import patch_view
from attnviz.ui.explorer.pickers import VIEWS, followed_head, pick_unit, pick_view
from attnviz.ui.explorer.rollout import rollout_view
from attnviz.ui.explorer.why import why_view
from attnviz.ui.explorer.writes import lens_view, logits_view
from attnviz.ui.language import t
from attnviz.views import registry

DRAW = {
    "heads": heads_view,
    "overview": overview,
    "detail": detail,
    "lines": lambda trace: lines_view(trace, followed_head(trace)[1]),  # the head in the URL
    "rollout": rollout_view,
    "query": one_query,
    "link": link,
    "outputs": outputs,
    "stats": stats,
    "logits": logits_view,
    "lens": lens_view,
    "compare": compare_view,
    "why": why_view,
    "flow": flow_view,
    "patch": patch_view,
}
# The views of a trace alone (the Playground's): not those that need a model's head or a second
# text (the Pretrained page passes every view).
OF_TRACE = tuple(v.name for v in registry.VIEWS if v.needs is None)
if set(DRAW) != set(registry.NAMES):  # a view added to the registry needs its drawer here
    raise RuntimeError(
        f"views without a drawer or drawers without a view: {set(DRAW) ^ set(registry.NAMES)}"
    )


def explorer(
    trace: Trace,
    default_view: str = "overview",
    views: tuple[str, ...] = OF_TRACE,
    follow: tuple[int, int] | None = None,
    words: bool = False,
) -> str:
    """The view picker and the chosen view. Returns the view shown.

    `follow`: the (layer, head) a panel above drew for; picking another head reruns the page.
    `words`: the "pieces | words" picker too, every view then drawn over the trace grouped so.
    """
    st.session_state["_follow_head"] = follow
    pieces = trace
    if words:
        trace = memos.grouped(trace, pick_unit(trace))
    view = pick_view(default_view, views)
    if trace is not pieces and not registry.BY_NAME[view].words:
        st.caption(t("ex.unit_pieces_only"))
        trace = pieces
    DRAW[view](trace)
    if trace is not pieces:
        chars = trace.unit == "char"  # a trace of words has no q, k, v to export
        st.caption(t("ex.unit_export_chars" if chars else "ex.unit_export"))
    export_json(pieces)
    return view


__all__ = ["DRAW", "OF_TRACE", "VIEWS", "explorer"]
