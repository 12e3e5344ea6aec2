"""The app's views for a notebook or a script: `attnviz.show(source, view, ...)`.

Each view is the same builder the app's explorer calls (attnviz.views.panels), with the same
Selection, so a notebook shows what the page shows; tests/test_notebook.py checks that against
the running page. `show` returns one View (the figures, displayed with Plotly's JSON and a static
SVG from attnviz.views.static) or, for "explore", the widget (attnviz.views.widget). No
streamlit here. A new view is one entry in attnviz.views.registry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from attnviz.engine.trace import Trace
from attnviz.views import registry
from attnviz.views.selection import Selection
from attnviz.views.static import figure_svg, figures_html

if TYPE_CHECKING:  # anywidget loads only for view="explore"
    from attnviz.views.widget import AttentionWidget


VIEWS = registry.drawn()  # name -> builder, the explorer's views that draw figures


class View:
    """What `show` returns: one object for every view, holding its figures (`.figures`).

    In a notebook each figure is displayed with two representations: Plotly's interactive one
    (application/vnd.plotly.v1+json) and a static SVG (text/html, image/svg+xml) that an exported
    or saved notebook (nbconvert HTML, GitHub) shows when Plotly cannot draw. It unpacks and
    indexes like the list of figures (`scores, logits, weights = show(t, view="detail")`)."""

    def __init__(self, name: str, figures: list[go.Figure]) -> None:
        self.name, self.figures = name, figures

    def __iter__(self):
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)

    def __getitem__(self, i: int) -> go.Figure:
        return self.figures[i]

    def __getattr__(self, name: str):  # a one-figure view reads like its figure (view.layout)
        if name != "figures" and len(self.__dict__.get("figures", ())) == 1:
            return getattr(self.figures[0], name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<attnviz view {self.name!r}: {len(self.figures)} figure(s)>"

    @staticmethod
    def bundle(fig: go.Figure) -> dict[str, object]:
        """One figure's mime bundle: interactive Plotly JSON plus the static fallbacks."""
        svg = figure_svg(fig)
        return {
            "application/vnd.plotly.v1+json": json.loads(fig.to_json()),
            "text/html": f'<div class="attnviz-static">{svg}</div>',
            "image/svg+xml": svg,
            "text/plain": repr(fig.layout.title.text or "figure"),
        }

    def _ipython_display_(self) -> None:
        from IPython.display import display

        for fig in self.figures:
            display(self.bundle(fig), raw=True)

    def _repr_html_(self) -> str:  # front ends that ask for HTML alone (marimo, Quarto)
        return figures_html(self.figures)

    def show(self) -> None:
        """Open every figure in a browser (outside a notebook)."""
        for fig in self.figures:
            fig.show()

    def write_html(self, path: str) -> None:
        """Every figure in one self-contained HTML file (plotly.js inlined: works offline)."""
        parts = [
            f.to_html(full_html=False, include_plotlyjs=(i == 0))
            for i, f in enumerate(self.figures)
        ]
        with open(path, "w", encoding="utf-8") as out:
            out.write("<!doctype html><meta charset='utf-8'><body>" + "".join(parts) + "</body>")


WEIGHTS_ONLY = {v.name for v in registry.VIEWS if v.weights_only} | {"explore"}


def as_trace(
    source: object, text: str | None = None, tokens: Sequence[str] | None = None, **trace_kw
) -> Trace:
    """A Trace from what a notebook user has: a Trace; a model (attnviz's LoadedModel or a
    transformers model object) and `text`; or `attentions` (per-layer weights from a forward with
    output_attentions=True) and `tokens`."""
    if isinstance(source, Trace):
        return source
    pair = isinstance(source, tuple) and len(source) == 2 and isinstance(source[1], list | tuple)
    if pair and source[1] and all(isinstance(t, str) for t in source[1]):
        source, tokens = source  # (attentions, tokens)
    if tokens is not None:
        from attnviz.engine.external import trace_from_attentions

        return trace_from_attentions(source, tokens)
    if text is None:
        raise TypeError(
            f"show() got a {type(source).__name__}: pass a Trace, a model with text=..., or "
            "attentions with tokens=... (or an (attentions, tokens) pair)"
        )
    from attnviz.engine.hooked import load_model, trace_model
    from attnviz.engine.hooked.loading import LoadedModel

    model = source if isinstance(source, LoadedModel) else load_model(source)
    return trace_model(model, text, **trace_kw)


def show(
    source: object,
    view: str = "overview",
    part: str | None = None,
    *,
    text: str | None = None,
    tokens: Sequence[str] | None = None,
    model: object = None,
    other: object = None,
    **selection: object,
) -> View | AttentionWidget:
    """The app's view `view` of `source`, as one displayable object.

    `source` is an attnviz Trace; or a model (from attnviz.load_model, or a transformers model
    object: its tokenizer is found beside it) with `text=`; or the attentions of any forward run
    with output_attentions=True with `tokens=` (or the pair `(attentions, tokens)`), which draws
    the weights views only. Views: "overview", "detail", "heads", "lines", "rollout", "query",
    "link", "outputs", "logits" (each head's push on the next token's logit: needs `model=`
    unless `source` is the model), "lens" (the logit lens: the same), "compare" (every head's
    change from `source` to `other=`, a Trace or a text of the same model), "flow" (the
    information-flow graph to the last token's prediction: needs `model=`), "patch" (activation
    patching: `source`'s text clean, `other=` a corrupted text of as many tokens, `model=`;
    `token=` the answer; exact head sweep, AtP with misses, residual AtP) return a `View`
    (Plotly figures with a static SVG fallback, so an exported notebook still shows them);
    "explore" returns the interactive widget (attnviz.views.widget: layer and head pickers, hover
    or click a token to isolate it, knobs that need no rerun).
    The selection keywords pick the layer/head/query/key (all 0 by default; `shared=True` shares
    colour scales, `scale="log"`, `lang="zh"`, `field="moved"` (value-weighted), `unit="word"`
    (words instead of pieces; "char": whole characters), `token=" tired"` (the logits view's
    token), `threshold=0.1` (the flow graph's); any field of attnviz.views.selection.Selection).
    `part` picks an encoder-decoder's "decoder" or "cross" attention."""
    if view not in VIEWS and view != "explore":
        raise ValueError(f"view={view!r} is not a view: use one of {', '.join(VIEWS)}, explore")
    unknown = set(selection) - set(Selection.names())
    if unknown:
        raise TypeError(
            f"show() got {', '.join(sorted(unknown))}; it takes {', '.join(Selection.names())}"
        )
    from attnviz.engine.hooked.loading import LoadedModel

    needs = registry.BY_NAME[view].needs if view in registry.BY_NAME else None
    if model is None and isinstance(source, LoadedModel):
        model = source
    _check_needs(view, needs, model, other)
    full = as_trace(source, text, tokens)
    trace = full if part is None else full.part(part)
    if trace.meta.get("weights_only") and view not in WEIGHTS_ONLY:
        raise ValueError(
            f"view={view!r} needs q, k and the raw scores, which attentions alone do not have: "
            f"use one of {', '.join(sorted(WEIGHTS_ONLY))}, or trace the model with attnviz"
        )
    sel = Selection(**selection)  # type: ignore[arg-type]
    if view not in registry.BY_NAME or registry.BY_NAME[view].words:  # else: pieces, as the app
        trace = grouped_as(trace, sel.unit)
    sel = sel.check(trace)
    if view == "explore":
        from attnviz.views.widget import explorer

        tr = sel.tr
        names = ("all_heads", "temperature", "threshold", "masked", "what_if")
        labels = {n: tr(f"lw.{n}") for n in names} | {"query": tr("w.query"), "key": tr("w.key")}
        labels["hint"] = tr("lw.hint_overview")
        return explorer(trace, layer=sel.layer, head=sel.head, labels=labels)
    if needs == "model":  # the whole run: the final state reads every part
        drawn = VIEWS[view](full, sel, _loaded(model))
    elif needs == "pair":  # the sentence clean, `other` corrupt (measures/patching.py)
        drawn = VIEWS[view](full, sel, (_loaded(model), other))
    elif needs == "other":
        if not isinstance(other, Trace):
            other = as_trace(model, str(other))
        second = other if part is None else other.part(part)
        drawn = VIEWS[view](trace, sel, grouped_as(second, sel.unit))
    else:
        drawn = VIEWS[view](trace, sel)
    return View(view, drawn if isinstance(drawn, list) else [drawn])


def _check_needs(view: str, needs: str | None, model: object, other: object) -> None:
    """A view that needs the model, a second trace or text, or both, has them."""
    if needs and model is None and not (needs == "other" and isinstance(other, Trace)):
        raise TypeError(
            f"view={view!r} needs the model: show(trace, view={view!r}, model=model)"
            if needs == "model"
            else f"view={view!r} needs other=: a second Trace (or a text and model=)"
            if needs == "other"
            else f"view={view!r} needs model= and other= (the corrupted text)"
        )
    if needs == "pair" and not isinstance(other, str):
        raise TypeError(f"view={view!r} needs other=: the corrupted text (a str)")


def grouped_as(trace: Trace, unit: str) -> Trace:
    """The trace over `unit`: itself for "pieces", else attnviz.grouped(trace, by=unit)."""
    if unit == "pieces" or trace.unit == unit:
        return trace
    from attnviz.measures.words import grouped

    return grouped(trace, by=unit)


def _loaded(model: object):
    """attnviz's LoadedModel for a model given to show (a transformers model object: loaded)."""
    from attnviz.engine.hooked import load_model
    from attnviz.engine.hooked.loading import LoadedModel

    return model if isinstance(model, LoadedModel) else load_model(model)


__all__ = ["VIEWS", "Selection", "View", "show"]
