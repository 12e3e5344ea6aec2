"""The app's views as plain Plotly figures, for a notebook or a script: `attnviz.show(trace, ...)`.

Each view builds its figures with the same builders and arguments as the app's explorer
(attnviz/ui/explorer.py), so a notebook shows what the page shows; tests/test_notebook.py checks
that against the running page. No streamlit here. A new view is one entry in VIEWS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from attnviz import figures
from attnviz.i18n import translate
from attnviz.trace import Trace


@dataclass(frozen=True)
class Selection:
    """What the app's pickers choose: a layer, a head, a query and a key position."""

    layer: int = 0
    head: int = 0
    query: int = 0
    key: int = 0
    shared: bool = False  # one colour scale for every panel (the app's "shared scale" toggle)
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


def heads(trace: Trace, sel: Selection) -> list[go.Figure]:
    lt = trace.layers[sel.layer]
    per_row = min(lt.n_heads, 3)
    return [
        figures.heatmap(
            lt.weights[h],
            trace.key_tokens,
            trace.tokens,
            title=_t(sel, "pg.head_title", h=h),
            value_name=_t(sel, "w.weights"),
            zmin=0.0,
            zmax=1.0,
            height=380,
            show_scale=h % per_row == per_row - 1,
            x_title=_t(sel, "w.key"),
            y_title=_t(sel, "w.query"),
        )
        for h in range(lt.n_heads)
    ]


def overview(trace: Trace, sel: Selection) -> go.Figure:
    return figures.mosaic(
        trace.weights(),
        shared_scale=sel.shared,
        selected=(sel.layer, sel.head),
        title=_t(sel, "ex.overview_title"),
    )


def detail(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Raw scores, the logits softmax sees, the weights: one head, as the Head detail view."""
    lt, head = trace.layers[sel.layer], sel.head
    logits = lt.logits()  # [head, q, k]
    finite = logits[logits.isfinite()]
    bound_scores = float(lt.scores.abs().max()) if sel.shared else None
    bound_logits = float(finite.abs().max()) if sel.shared and finite.numel() else None
    common = dict(height=420, x_title=_t(sel, "w.key"), y_title=_t(sel, "w.query"))
    return [
        figures.heatmap(
            lt.scores[head],
            trace.key_tokens,
            trace.tokens,
            title=_t(sel, "w.scores"),
            value_name="q·k",
            signed=True,
            zmin=None if bound_scores is None else -bound_scores,
            zmax=bound_scores,
            **common,
        ),
        figures.heatmap(
            logits[head],
            trace.key_tokens,
            trace.tokens,
            title=_t(sel, "w.logits") + f" · × {lt.scale:.4g}",
            value_name="logit",
            signed=True,
            zmin=None if bound_logits is None else -bound_logits,
            zmax=bound_logits,
            show_y_labels=False,
            **common,
        ),
        figures.heatmap(
            lt.weights[head],
            trace.key_tokens,
            trace.tokens,
            title=_t(sel, "w.weights"),
            value_name=_t(sel, "w.weights"),
            zmin=0.0,
            zmax=1.0 if sel.shared else None,
            show_y_labels=False,
            **common,
        ),
    ]


def query(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Where one query looks, its q vector, and q_i·k_i for every key (the One query view)."""
    lt, head, query = trace.layers[sel.layer], sel.head, sel.query
    kv = head // (lt.n_heads // lt.n_kv_heads)
    q = lt.q[head, query]  # [d_head]
    k = lt.k[kv]  # [k, d_head]
    dims = [str(i) for i in range(q.shape[0])]
    return [
        figures.bars(
            lt.weights[head, query],
            trace.key_tokens,
            title=_t(sel, "ex.query_bars", token=trace.tokens[query]),
            highlight=query if not trace.is_cross else None,
        ),
        figures.heatmap(
            q.unsqueeze(0),
            dims,
            [trace.tokens[query]],
            title=_t(sel, "ex.q_vector"),
            value_name="q",
            signed=True,
            height=200,
            max_ticks=8,
            x_title="dim",
            y_title=_t(sel, "w.query"),
        ),
        figures.heatmap(
            k * q,  # [k, d_head]: each row sums to that key's q·k
            dims,
            trace.key_tokens,
            title=_t(sel, "ex.qk_products"),
            value_name="q_i·k_i",
            signed=True,
            height=max(260, 22 * k.shape[0]),
            max_ticks=16,
            x_title="dim",
            y_title=_t(sel, "w.key"),
        ),
    ]


def link(trace: Trace, sel: Selection) -> go.Figure:
    """The weight from one query token to one key token in every head (the Link view)."""
    keys = trace.key_tokens
    grid = trace.weights()[:, :, sel.query, sel.key]  # [layer, head]
    fig = figures.heatmap(
        grid,
        [f"H{h}" for h in range(grid.shape[1])],
        [f"L{la}" for la in range(grid.shape[0])],
        title=_t(sel, "ex.link_title", q=trace.tokens[sel.query], k=keys[sel.key]),
        value_name=_t(sel, "w.weights"),
        zmin=0.0,
        zmax=max(float(grid.max()), 1e-6),
        show_values=grid.numel() <= 400,
        height=90 + 34 * grid.shape[0],
        x_title=_t(sel, "ex.head"),
        y_title=_t(sel, "pg.layer"),
    )
    fig.update_xaxes(tickangle=0)
    return fig


def outputs(trace: Trace, sel: Selection) -> list[go.Figure]:
    lt = trace.layers[sel.layer]
    panels = (
        (lt.z[sel.head], _t(sel, "ex.z_title", h=sel.head), "z"),
        (lt.output, _t(sel, "ex.output_title"), "output"),
    )
    return [
        figures.vectors(
            matrix, trace.tokens, title=title, value_name=name, y_title=_t(sel, "w.query")
        )
        for matrix, title, name in panels
    ]


ViewFn = Callable[[Trace, Selection], "go.Figure | list[go.Figure]"]
VIEWS: dict[str, ViewFn] = {
    "heads": heads,
    "overview": overview,
    "detail": detail,
    "query": query,
    "link": link,
    "outputs": outputs,
}


def show(
    trace: Trace, view: str = "overview", part: str | None = None, **selection: object
) -> go.Figure | list[go.Figure]:
    """The figures the app draws for `view` ("overview", "detail", "heads", "query", "link",
    "outputs"), for the layer/head/query/key chosen by keyword (all 0 by default; `shared=True`
    shares colour scales, `lang="zh"` titles in Chinese). A view of one figure returns it; a view
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
