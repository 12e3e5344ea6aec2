"""The overview: every layer x head in one image; a click picks a head, shown below it."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.serve.memos import per_trace
from attnviz.ui import markup, projector, url
from attnviz.ui.caching import trace_fragment
from attnviz.ui.explorer.detail import head_maps
from attnviz.ui.explorer.pickers import (
    layer_and_head,
    open_head,
    passing,
    pick_field,
    pick_focus,
    pick_scale,
    selection,
)
from attnviz.ui.language import t
from attnviz.ui.widgets import chart
from attnviz.views import maps, panels, spec
from attnviz.views.tokens import shown


def _mosaic_pick() -> None:
    # Runs before the rerun, so it may move the layer/head sliders to the clicked thumbnail.
    event = st.session_state.get("mosaic")
    points = event["selection"]["points"] if event else []
    if points and points[0].get("customdata") is not None:
        open_head(*points[0]["customdata"][:2])


@trace_fragment
def overview(trace: Trace) -> None:
    """Every layer x head in one image; pick one to drill in."""
    shared = st.toggle(
        t("ex.shared_scale"), value=url.default("mosaic_shared"), help=t("ex.shared_help"),
        **url.bound("mosaic_shared"),
    )  # fmt: skip
    field = pick_field(trace)
    layer, head, column = layer_and_head(trace, third=True)
    with column:
        focus = pick_focus(trace)
    n = panels.size(trace)
    # The colour scale of the mosaic and of the chosen head below it, picked here and not below
    # the mosaic: a picker drawn after the image left its choice unset on the first run, so the
    # next head change drew (and sent) the mosaic again in another scale.
    mode = pick_scale(n, short="max")
    # Cached per trace: the same figure object when only the head changes, so the browser keeps
    # the image (Streamlit sends a reference to a message it already holds, not the image again).
    # Projector mode's page is narrower: a mosaic sized for a 1920 screen left an empty band.
    width = panels.MOSAIC_WIDTH_PROJECTOR if projector.on() else panels.MOSAIC_WIDTH
    sel = selection(shared=shared, focus=focus, scale=mode, field=field)  # no head: the same image

    def mosaic() -> spec.Spec:
        with spec.making_specs():
            return panels.overview_figure(trace, sel, width=width)

    with passing(trace, maps=True):
        fig = per_trace(trace, ("mosaic", sel, width), mosaic)
    chart(
        fig,
        key="mosaic",
        name=f"overview_{trace.n_layers}x{trace.n_heads}",
        on_select=_mosaic_pick,
        selection_mode="points",
    )
    st.caption(t("ex.overview_help" if field == "weights" else "ex.overview_help_moved"))
    st.caption(t("ex.overview_selected", l=layer, h=head))
    if focus is not None:
        caption = "lv.focus_caption" if field == "weights" else "lv.focus_caption_moved"
        st.caption(t(caption, token=markup.escape(shown(trace.tokens[focus]))))
    gamma = panels.overview_gamma(trace, mode)
    if gamma != 1.0:
        st.caption(t("lv.mosaic_gamma", gamma=gamma))
    if not panels.overview_head_is_picture(trace):
        head_maps(trace, layer, head, shared=False, mode=mode, field=field)
        return
    # Long input: the chosen head as an image, not three maps of n x n numbers (at 512 tokens
    # ~3.3 MB on every head change; this is tens of KB). Head detail has the numbers.
    fig = panels.head_image_figure(
        trace, selection(layer=layer, head=head, scale=mode, field=field)
    )
    chart(fig, key="overview_head", name=f"weights_L{layer}_H{head}")
    st.caption(t("ex.overview_head_help", k=maps.positions_per_pixel(n)))
    st.button(
        t("ex.link_open", l=layer, h=head),
        on_click=open_head,
        args=(layer, head, "detail"),
        key="overview_open",
    )
