"""The app's views as plain Plotly figures, for a notebook or a script: `attnviz.show(trace, ...)`.

Each view builds its figures with the same builders and arguments as the app's explorer
(attnviz/ui/explorer.py), so a notebook shows what the page shows; tests/test_notebook.py checks
that against the running page. No streamlit here. A new view is one entry in VIEWS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from attnviz.engine.trace import Trace
from attnviz.i18n import translate
from attnviz.views import panels as views
from attnviz.views.lines import is_cjk, lines_figure


@dataclass(frozen=True)
class Selection:
    """What the app's pickers choose: a layer, a head, a query and a key position."""

    layer: int = 0
    head: int = 0
    query: int = 0
    key: int = 0
    shared: bool = False  # one colour scale for every panel (the app's "shared scale" toggle)
    scale: str | None = None  # weights colour scale: fixed, max, power, log (None: as the app)
    lang: str = "en"

    def check(self, trace: Trace) -> None:
        n_q, n_k = len(trace.tokens), len(trace.key_tokens)
        for name, value, hi in (
            ("layer", self.layer, trace.n_layers),
            ("head", self.head, trace.n_heads),
            ("query", self.query, n_q),
            ("key", self.key, n_k),
        ):
            if not 0 <= value < hi:
                raise ValueError(f"{name}={value} is outside the trace: pick 0..{hi - 1}")


def _t(sel: Selection, key: str, **fmt: object) -> str:
    return translate(key, sel.lang, **fmt)


def _tr(sel: Selection):
    return lambda key, **fmt: translate(key, sel.lang, **fmt)


def heads(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Every head of one layer (the All heads view)."""
    mode = sel.scale or views.default_scale(max(len(trace.tokens), len(trace.key_tokens)))
    return views.heads_figures(trace, _tr(sel), sel.layer, mode)


def overview(trace: Trace, sel: Selection) -> go.Figure:
    """Every layer x head in one image (the Overview)."""
    return views.overview_figure(trace, _tr(sel), sel.shared, mode=sel.scale)


def detail(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Raw scores, the logits softmax sees, the weights: one head, as the Head detail view."""
    return views.detail_figures(trace, _tr(sel), sel.layer, sel.head, sel.shared, sel.scale)


def lines(trace: Trace, sel: Selection) -> go.Figure:
    """One head's weights as lines between the query and key tokens (the Lines view)."""
    rows = is_cjk(trace.tokens)
    return lines_figure(
        trace.layers[sel.layer].weights,  # [head, q, k]
        trace.tokens,
        trace.key_tokens,
        [sel.head],
        threshold=0.01 if max(len(trace.tokens), len(trace.key_tokens)) <= 40 else 0.02,
        mask=trace.layers[sel.layer].mask,
        rows=rows,
        q_title=_t(sel, "w.query"),
        k_title=_t(sel, "w.key"),
        head_name=_t(sel, "ex.head"),
        length_px=1100 if rows else None,
        title=_t(sel, "lv.lines_title_rows" if rows else "lv.lines_title", l=sel.layer),
    )


def rollout(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Attention rollout at one layer, and which input tokens feed the query (the Rollout view)."""
    return views.rollout_figures(trace, _tr(sel), sel.layer, sel.query, mode=sel.scale)


def query(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Where one query looks, its q vector, and q_i·k_i for every key (the One query view)."""
    return views.query_figures(trace, _tr(sel), sel.layer, sel.head, sel.query)


def link(trace: Trace, sel: Selection) -> go.Figure:
    """The weight from one query token to one key token in every head (the Link view)."""
    return views.link_figure(trace, _tr(sel), sel.query, sel.key)


def outputs(trace: Trace, sel: Selection) -> list[go.Figure]:
    """One head's z and the block's output after W_O (the Outputs view)."""
    return views.outputs_figures(trace, _tr(sel), sel.layer, sel.head)


ViewFn = Callable[[Trace, Selection], "go.Figure | list[go.Figure]"]
VIEWS: dict[str, ViewFn] = {
    "heads": heads,
    "overview": overview,
    "detail": detail,
    "lines": lines,
    "rollout": rollout,
    "query": query,
    "link": link,
    "outputs": outputs,
}


def show(
    trace: Trace, view: str = "overview", part: str | None = None, **selection: object
) -> go.Figure | list[go.Figure]:
    """The figures the app draws for `view` ("overview", "detail", "heads", "lines", "rollout",
    "query", "link", "outputs"), for the layer/head/query/key chosen by keyword (all 0 by default;
    `shared=True` shares colour scales, `scale="log"` picks the weights' colour scale, `lang="zh"`
    titles in Chinese). A view of one figure returns it; a view
    of several returns a list. `part` picks an encoder-decoder's "decoder" or "cross" attention.
    In a notebook the figure draws itself; in a script call `.show()` or `.write_html(path)`."""
    if view not in VIEWS:
        raise ValueError(f"view={view!r} is not a view: use one of {', '.join(VIEWS)}")
    unknown = set(selection) - set(Selection.__dataclass_fields__)
    if unknown:
        raise TypeError(
            f"show() got {', '.join(sorted(unknown))}; it takes "
            f"{', '.join(Selection.__dataclass_fields__)}"
        )
    if part is not None:
        trace = trace.part(part)
    sel = Selection(**selection)  # type: ignore[arg-type]
    sel.check(trace)
    return VIEWS[view](trace, sel)


__all__ = ["VIEWS", "Selection", "show"]
