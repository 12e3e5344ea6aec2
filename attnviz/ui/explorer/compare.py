"""Compare: the page's text against a second one ("compare with", in the URL), every head ranked
by how much its weights (or moved) changed, as a grid and a table; a click on a head shows its
maps of both texts side by side with their difference over the tokens that align.

The second trace is the first one's request with the other text (the same model and what-if
knobs; hidden tokens are positions of the first text, so not carried over), from the same
byte-bounded cache, at the same part and grouping.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.serve import memos
from attnviz.serve.memos import per_trace
from attnviz.ui import url
from attnviz.ui.caching import cached_trace
from attnviz.ui.explorer.pickers import layer_and_head, open_head, passing, pick_field, selection
from attnviz.ui.language import input_problem, localized, t
from attnviz.ui.widgets import chart, table, token_legend
from attnviz.views import compare, writes

SHOWN = ("rank", "layer", "head", "change", "change_rel", "d_entropy_rel", "d_max_weight",
         "d_distance", "d_first", "d_special")  # fmt: skip


def other_trace(trace: Trace, text: str) -> Trace:
    """The trace of `text` asked for as `trace` was (model, second text, knobs but hidden tokens),
    at its part and grouping. ValueError / TypeError for a text the engine refuses."""
    request = trace.request
    knobs = replace(request.knobs, mask_tokens=())
    full = cached_trace(replace(request, text=text, knobs=knobs))
    return memos.grouped(full.part(trace.meta.get("part", "encoder")), trace.unit)


def _clicked() -> None:
    found = writes.picked(st.session_state.get("cmp_grid"))
    if found is not None:
        open_head(*found)


def _open_top(trace: Trace, text: str, found, linked: bool) -> None:
    """A new comparison (another text, unit or part) opens on its top-ranked head, before the
    pickers are drawn; a link that names a head keeps it."""
    opened = (text, trace.unit, trace.meta.get("part"))
    if st.session_state.get("_cmp_opened") == opened:
        return
    st.session_state["_cmp_opened"] = opened
    if not linked and len(found):
        top = found.sort_values("rank").iloc[0]
        open_head(int(top["layer"]), int(top["head"]))


def compare_view(trace: Trace) -> None:
    """The second text, the heads ranked by their change, and one head of both side by side."""
    text = st.text_area(t("cmp.text"), help=t("cmp.text_help"), height=68, **url.bound("cmp"))
    linked = (url.present("layer") or url.present("head")) and url.first_sight("head")
    field = pick_field(trace)
    found = problem = None
    if trace.request is not None and text.strip():
        try:
            other = other_trace(trace, text)
            with passing(trace), passing(other):
                tables = per_trace(
                    trace, ("compare", other.request, trace.unit),
                    lambda: compare.compare_tables(trace, other), keep=2,
                )  # fmt: skip
            found = tables[field]
            _open_top(trace, text, found, linked)
        except (ValueError, TypeError) as err:
            problem = err
    # the pickers before anything can stop the view: the layer and head stay in the link
    layer, head, _ = layer_and_head(trace)
    if trace.request is None:
        st.info(t("cmp.no_request"))
        return
    if not text.strip():
        st.info(t("cmp.empty"))
        return
    if problem is not None:
        st.info(input_problem(problem))
        return
    n_aligned, n = found.attrs.get("n_aligned", 0), min(len(trace.tokens), len(other.tokens))
    if compare.aligned(found):
        st.caption(t("cmp.aligned", k=n_aligned, n=n))
    else:
        st.warning(t("cmp.not_aligned", k=n_aligned, n=n))
    sel = selection(layer=layer, head=head, field=field)
    chart(compare.change_grid_figure(found, sel), key="cmp_grid", name=f"compare_{field}",
          on_select=_clicked, selection_mode="points")  # fmt: skip
    st.caption(t("cmp.grid_help"))
    figs = compare.pair_figures(trace, other, sel, found)
    # both texts side by side, their difference below at the same size (three in a row leave a
    # 1280-wide page maps too narrow to read)
    cells = [*st.columns(2), *st.columns(2)[:1]]
    for col, fig, name in zip(cells, figs, ("a", "b", "diff"), strict=False):
        with col:
            chart(fig, key=f"cmp_map_{name}", name=f"compare_{name}_L{layer}_H{head}")
    token_legend(
        [*trace.tokens, *other.tokens, *(trace.key_tokens or []), *(other.key_tokens or [])]
    )
    shown = [c for c in SHOWN if c in found and (compare.aligned(found) or "change" not in c)]
    table(localized(found[shown]), hide_index=True, key="cmp_table", height=300)
    if compare.aligned(found):
        st.caption(t(f"cmp.table_help.{field}"))
    st.download_button(
        t("ex.csv_stats"), lambda: found.to_csv(index=False), file_name=f"compare_{field}.csv",
        mime="text/csv", on_click="ignore", key="csv_compare",
    )  # fmt: skip
