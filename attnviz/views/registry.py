"""Every view of a trace, in one table: its name (also the URL's `view=` value and the label key
"ex.view.<name>"), what it draws for `attnviz.show` (the same builder the app's explorer calls),
which pickers it has, and whether attentions alone (no q, k or scores) can draw it.

A new view is one entry here plus its builder in attnviz.views.panels, and its drawer (the
widgets around the figures) in attnviz.ui.explorer. No streamlit here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import plotly.graph_objects as go

from attnviz.engine.trace import Trace
from attnviz.views import panels
from attnviz.views.selection import Selection

Figures = Callable[[Trace, Selection], "go.Figure | list[go.Figure]"]


@dataclass(frozen=True)
class View:
    """One view. `figures`: its figures for a Selection (None: a table, not drawn by show);
    `picks`: the pickers it has among "layer" and "head"; `weights_only`: attentions alone
    suffice (a model's output_attentions, with no q, k or scores)."""

    name: str
    figures: Figures | None
    picks: frozenset[str] = frozenset()
    weights_only: bool = False

    @property
    def label(self) -> str:
        """The i18n key of its name in the view picker."""
        return f"ex.view.{self.name}"


LAYER, HEAD = frozenset({"layer"}), frozenset({"layer", "head"})
VIEWS: tuple[View, ...] = (
    View("heads", panels.heads_figures, LAYER, True),  # every head of one layer
    View("overview", panels.overview_figure, HEAD, True),  # every layer x head in one image
    View("detail", panels.detail_figures, HEAD),  # one head's scores, logits and weights
    View("lines", panels.lines_figures, LAYER, True),  # one layer's heads as lines between tokens
    View("rollout", panels.rollout_figures, LAYER, True),  # attention composed across layers
    View("query", panels.query_figures, HEAD),  # one query in numbers: where it looks, q, q_i·k_i
    View("link", panels.link_figure, weights_only=True),  # one query to one key in every head
    View("outputs", panels.outputs_figures, HEAD),  # one head's z and the block's output
    View("stats", None),  # a sortable table of every head's statistics
)
BY_NAME = {view.name: view for view in VIEWS}
NAMES = tuple(BY_NAME)


def drawn() -> dict[str, Figures]:
    """The views `attnviz.show` draws: name -> builder."""
    return {v.name: v.figures for v in VIEWS if v.figures is not None}
