"""The app's views as plain Plotly figures, for a notebook or a script: `attnviz.show(trace, ...)`.

Each view is the same builder the app's explorer calls (attnviz.views.panels), with the same
Selection, so a notebook shows what the page shows; tests/test_notebook.py checks that against
the running page. No streamlit here. A new view is one entry in VIEWS.
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from attnviz.engine.trace import Trace
from attnviz.views import panels
from attnviz.views.lines import is_cjk, lines_figure
from attnviz.views.selection import Selection


def lines(trace: Trace, sel: Selection) -> go.Figure:
    """One head's weights as lines between the query and key tokens (the Lines view)."""
    rows, tr = is_cjk(trace.tokens), sel.tr
    return lines_figure(
        trace.layers[sel.layer].weights,  # [head, q, k]
        trace.tokens,
        trace.key_tokens,
        [sel.head],
        threshold=0.01 if max(len(trace.tokens), len(trace.key_tokens)) <= 40 else 0.02,
        mask=trace.layers[sel.layer].mask,
        rows=rows,
        q_title=tr("w.query"),
        k_title=tr("w.key"),
        head_name=tr("ex.head"),
        length_px=1100 if rows else None,
        title=tr("lv.lines_title_rows" if rows else "lv.lines_title", l=sel.layer),
    )


ViewFn = Callable[[Trace, Selection], "go.Figure | list[go.Figure]"]
VIEWS: dict[str, ViewFn] = {
    "heads": panels.heads_figures,  # every head of one layer
    "overview": panels.overview_figure,  # every layer x head in one image
    "detail": panels.detail_figures,  # one head's scores, logits and weights
    "lines": lines,  # one head's weights as lines between tokens
    "rollout": panels.rollout_figures,  # attention composed across layers, and one query's row
    "query": panels.query_figures,  # one query in numbers: where it looks, q, q_i·k_i
    "link": panels.link_figure,  # the weight from one query to one key in every head
    "outputs": panels.outputs_figures,  # one head's z and the block's output after W_O
}


def show(
    trace: Trace, view: str = "overview", part: str | None = None, **selection: object
) -> go.Figure | list[go.Figure]:
    """The figures the app draws for `view` ("overview", "detail", "heads", "lines", "rollout",
    "query", "link", "outputs"), for the layer/head/query/key chosen by keyword (all 0 by default;
    `shared=True` shares colour scales, `scale="log"` picks the weights' colour scale, `lang="zh"`
    titles in Chinese; any field of attnviz.views.selection.Selection). A view of one figure
    returns it; a view of several returns a list. `part` picks an encoder-decoder's "decoder" or
    "cross" attention. In a notebook the figure draws itself; in a script call `.show()` or
    `.write_html(path)`."""
    if view not in VIEWS:
        raise ValueError(f"view={view!r} is not a view: use one of {', '.join(VIEWS)}")
    unknown = set(selection) - set(Selection.names())
    if unknown:
        raise TypeError(
            f"show() got {', '.join(sorted(unknown))}; it takes {', '.join(Selection.names())}"
        )
    if part is not None:
        trace = trace.part(part)
    sel = Selection(**selection).check(trace)  # type: ignore[arg-type]
    return VIEWS[view](trace, sel)


__all__ = ["VIEWS", "Selection", "show"]
