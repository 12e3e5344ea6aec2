"""Every view of a trace, in one table: its name (also the URL's `view=` value and the label key
"ex.view.<name>"), what it draws for `attnviz.show` (the same builder the app's explorer calls),
which pickers it has, and whether attentions alone (no q, k or scores) can draw it.

A new view is one entry here plus its builder in attnviz.views.panels (or a module of its own:
writes, compare), and its drawer (the widgets around the figures) in attnviz.ui.explorer. A view
that `needs` more than the trace takes it as a third argument: "model" (the loaded model: the
app finds it by the trace's request, a notebook passes model=), "other" (a second trace to
compare with), "pair" (the model and a second text: Patch). No streamlit here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from attnviz.engine.trace import Trace
from attnviz.views import compare, flow, panels, patching, why, writes
from attnviz.views.selection import Selection

Figures = Callable[[Trace, Selection], "go.Figure | list[go.Figure]"]


@dataclass(frozen=True)
class View:
    """One view. `figures`: its figures for a Selection (None: a table, not drawn by show);
    `picks`: the pickers it has among "layer" and "head"; `weights_only`: attentions alone
    suffice (a model's output_attentions, with no q, k or scores); `needs`: "model", "other" or
    "pair" (its third argument: the model, a second trace, or (model, second text)), or None;
    `fields`: it has the "weights | moved" switch; `words`: it can draw a trace grouped into
    words (else it shows the pieces: q, k, scores and z do not add up over a word's pieces)."""

    name: str
    figures: Figures | None
    picks: frozenset[str] = frozenset()
    weights_only: bool = False
    needs: str | None = None
    fields: bool = False
    words: bool = True

    @property
    def label(self) -> str:
        """The i18n key of its name in the view picker."""
        return f"ex.view.{self.name}"


LAYER, HEAD = frozenset({"layer"}), frozenset({"layer", "head"})
VIEWS: tuple[View, ...] = (
    View("heads", panels.layer_heads, LAYER, True, fields=True),  # every head of one layer
    View("overview", panels.overview_figure, HEAD, True, fields=True),  # every layer x head
    View("detail", panels.detail_figures, HEAD, fields=True),  # one head's scores, logits, weights
    View("lines", panels.lines_figures, LAYER, True, fields=True),  # a layer's heads as lines
    View("rollout", panels.rollout_figures, LAYER, True),  # attention composed across layers
    View("query", panels.query_figures, HEAD, words=False),  # one query in numbers: q, q_i·k_i
    View("link", panels.link_figure, weights_only=True, fields=True),  # one query to one key
    View("outputs", panels.outputs_figures, HEAD, words=False),  # one head's z, the output
    View("stats", None, fields=True),  # a sortable table of every head's statistics
    View("logits", writes.logits_figures, needs="model"),  # each head's push on a token's logit
    View("lens", writes.lens_figures, needs="model"),  # the residual stream read out by layer
    View("compare", compare.compare_figures, HEAD, fields=True, needs="other"),  # two inputs
    View("why", why.why_figures, HEAD, needs="model", words=False),  # a logit split q x k
    View("flow", flow.flow_figures, needs="model", words=False),  # information-flow routes
    View("patch", patching.patch_figures, needs="pair", words=False),  # does a head matter
)
BY_NAME = {view.name: view for view in VIEWS}
NAMES = tuple(BY_NAME)


# The views of a model's language-model head, offered where there is one (a decoder, BART).
NEEDS_HEAD = tuple(v.name for v in VIEWS if v.needs in ("model", "pair") and v.name != "why")


def drawn() -> dict[str, Figures]:
    """The views `attnviz.show` draws: name -> builder."""
    return {v.name: v.figures for v in VIEWS if v.figures is not None}
