"""The Pretrained page's what-if results: a one-line summary, the details folded into tabs.

Compact on purpose: the views below stay near the top of the page. The per-head difference shows
the head open in the view below (the explorer reruns the page when that head changes).
"""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.measures.whatif import WhatIf
from attnviz.ui import markup
from attnviz.ui.language import t
from attnviz.ui.widgets import chart
from attnviz.views import charts
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map, mark_cells
from attnviz.views.tokens import shown


def results(change: WhatIf, trace: Trace, base: Trace, head: tuple[int, int]) -> None:
    """Three numbers in one row, a sentence on what silencing does, and the rest in tabs."""
    with st.container(border=True):
        c1, c2, c3 = st.columns(3)
        c1.metric(t("pretrained.cosine"), f"{change.cosine:.4f}")
        tok = change.most_changed_token
        c2.metric(
            t("wi.token_metric", token=markup.escape(shown(trace.tokens[tok]))),
            f"{float(change.token_change[tok]):.1%}",
        )
        first = change.first_moved_layer
        c3.metric(
            t("wi.heads_moved"),
            f"{change.heads_moved} / {change.shift.numel()}",
            help=t("wi.heads_moved_help"),
        )
        if change.silenced:
            names = ", ".join(f"L{la}H{h}" for la, h in change.silenced)
            key = "wi.silenced_last" if change.silenced_only_later else "wi.silenced_note"
            st.caption(t(key, heads=names, first="—" if first is None else first))
        with st.expander(t("wi.details"), expanded=False):
            tabs = st.tabs([t("wi.tab_tokens"), t("wi.tab_layers"), t("wi.tab_head")])
            with tabs[0]:
                chart(
                    charts.bars(
                        change.token_change,
                        trace.tokens,
                        title=t("wi.tokens_title"),
                        value_name=t("wi.change"),
                    ),
                    key="wi_tokens",
                )
                layers = [f"L{la}" for la in range(trace.n_layers)]
                top = max(float(change.layer_change.max()), 0.01)
                fig = draw_map(
                    change.layer_change,
                    Axis(trace.tokens, t("w.query")),
                    Axis(layers, t("pg.layer")),
                    Colour(zmin=0.0, zmax=top, value=t("wi.change")),
                    Marks(),
                    Frame(t("wi.layers_out_title"), 90 + 30 * trace.n_layers),
                )
                chart(fig, key="wi_layer_tokens")
            with tabs[1]:
                shift = change.shift  # [layer, head]
                fig = draw_map(
                    shift,
                    Axis([f"H{h}" for h in range(trace.n_heads)]),
                    Axis([f"L{la}" for la in range(trace.n_layers)]),
                    # no "1μ" scale over an all-zero grid
                    Colour(zmin=0.0, zmax=max(float(shift.max()), 0.05), value="Δ"),
                    Marks(numbers=True),
                    Frame(t("pretrained.shift_title"), 80 + 34 * trace.n_layers),
                )
                fig.update_xaxes(tickangle=0)
                mark_cells(fig, change.silenced)
                chart(fig, key="shift")
                st.caption(t("wi.shift_help"))
            with tabs[2]:
                la, h = head
                st.caption(t("wi.head_follows", l=la, h=h))
                # new − base on one symmetric scale (red: more weight than the unchanged model)
                diff = trace.layers[la].head("weights", h) - base.layers[la].head("weights", h)
                fig = draw_map(
                    diff,  # [q, k]
                    Axis(trace.key_tokens, t("w.key")),
                    Axis(trace.tokens, t("w.query")),
                    Colour.diverging(t("w.diff"), 1.0),
                    Marks(),
                    Frame(t("pretrained.diff_title", l=la, h=h), 460),
                )
                chart(fig, key="diff")
                if (la, h) in change.silenced or float(change.shift[la, h]) <= 1e-6:
                    st.caption(t("wi.head_unmoved", l=la, h=h))
