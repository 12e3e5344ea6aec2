"""The views the Playground and the model page share: a view picker and the chosen view.

The views are attnviz.views.registry's; here each gets its drawer, the widgets around its figures,
one module a view: heads (all heads of a layer), overview, detail (Head detail), lines, rollout,
numbers (One query, Outputs, head statistics), link (Link two tokens); pickers holds the pickers
and the one place that moves the layer and head; export the downloads under every view. Each view
that has pickers is a fragment: picking a head reruns only that part of the page.
"""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui.explorer.detail import detail
from attnviz.ui.explorer.export import export_json
from attnviz.ui.explorer.heads import heads_view
from attnviz.ui.explorer.lines import lines_view
from attnviz.ui.explorer.link import link
from attnviz.ui.explorer.numbers import one_query, outputs, stats
from attnviz.ui.explorer.overview import overview
from attnviz.ui.explorer.pickers import VIEWS, followed_head, pick_view
from attnviz.ui.explorer.rollout import rollout_view
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
}
if set(DRAW) != set(registry.NAMES):  # a view added to the registry needs its drawer here
    raise RuntimeError(
        f"views without a drawer or drawers without a view: {set(DRAW) ^ set(registry.NAMES)}"
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
    DRAW[view](trace)
    export_json(trace)
    return view
