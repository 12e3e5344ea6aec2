"""The explorer's pickers, each kept in the URL (attnviz.ui.url), and the one place that moves the
layer and head from outside their sliders (a click on the mosaic, "open in Head detail")."""

from __future__ import annotations

import contextlib
from typing import Any

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.measures.links import default_query
from attnviz.serve import bandpool
from attnviz.ui import url
from attnviz.ui.language import lang, t
from attnviz.ui.widgets import numbered
from attnviz.views import panels, registry
from attnviz.views.colour import SCALES
from attnviz.views.panels import default_scale, needs_window
from attnviz.views.selection import FIELDS, UNITS, Selection

VIEWS = url.VIEWS


def pick_view(default: str, views: tuple[str, ...] = VIEWS) -> str:
    url.seed("view", list(views), default)
    # Sent to the browser on every run: after a run without the explorer (an empty sentence, a
    # model that did not load) the browser remounts the picker empty unless the server sends it.
    current = st.session_state.get("view")
    st.session_state["view"] = current if current in views else default
    view = st.segmented_control(
        t("ex.view"), views, format_func=lambda v: t(registry.BY_NAME[v].label), key="view"
    )
    url.sync("view", default)
    return view or default


def _int_in_range(key: str, hi: int, default: int | None = None) -> None:
    if not isinstance(st.session_state.get(key), int) or not 0 <= st.session_state[key] < hi:
        st.session_state[key] = url.default(key) if default is None else default


def _pick_index(name: str, label: str, n: int) -> int:
    # By value in the URL (url.seed / url.sync), written even at 0: a view without this picker
    # (Lines draws the head; Link, the statistics) keeps it in the link and in the history.
    url.seed(name, list(range(n)), url.default(name))
    _int_in_range(name, n)
    picked = st.slider(label, 0, n - 1, key=name)
    url.sync(name, url.default(name))
    return picked


def pick_layer(trace: Trace) -> int:
    if trace.n_layers == 1:
        return 0
    return _pick_index("layer", t("pg.layer"), trace.n_layers)


def pick_head(trace: Trace) -> int:
    if trace.n_heads == 1:
        return 0
    head = _pick_index("head", t("ex.head"), trace.n_heads)
    _follow(st.session_state.get("layer", 0) if trace.n_layers > 1 else 0, head)
    return head


def layer_and_head(trace: Trace, third: bool = False) -> tuple[int, int, Any]:
    """The layer and head pickers in one row, and with `third` a column beside them for a third
    control (the caller draws it there: `with column: ...`), else None."""
    cols = st.columns(3 if third else 2)
    with cols[0]:
        layer = pick_layer(trace)
    with cols[1]:
        head = pick_head(trace)
    return layer, head, cols[2] if third else None


def _follow(layer: int, head: int) -> None:
    # The what-if panel above the views compares the head open here: a head picked inside a
    # fragment reruns the whole page so the panel follows (explorer() sets what it drew).
    drawn = st.session_state.get("_follow_head")
    if drawn is not None and tuple(drawn) != (layer, head):
        st.rerun(scope="app")


def open_head(layer: int, head: int, view: str | None = None, mark: str | None = None) -> None:
    """Move the layer and head pickers (a callback: before the rerun that draws them), and
    optionally the view and the cell Head detail outlines ("q,k")."""
    st.session_state["layer"], st.session_state["head"] = int(layer), int(head)
    if view is not None:
        st.session_state["view"] = view
    if mark is not None:
        st.session_state["mark"] = mark


def has_model(trace: Trace) -> bool:
    """Whether the trace came from a pretrained model (Why here reads its modules)."""
    from attnviz.engine.config import StackConfig

    request = trace.request
    return request is not None and not isinstance(request.model, StackConfig)


def open_why(layer: int, head: int, query: int, key: int) -> None:
    """Open Why here on one head's (query, key) cell (a callback)."""
    open_head(layer, head, view="why")
    st.session_state["query"], st.session_state["why_key"] = int(query), int(key)
    url.chose("query")
    url.chose("why_key")


def followed_head(trace: Trace) -> tuple[int, int]:
    """The (layer, head) open in the views: their pickers' state, else the URL, else 0."""

    def value(name: str, hi: int) -> int:
        raw = st.session_state.get(name, url.read(name))
        return raw if isinstance(raw, int) and 0 <= raw < hi else 0

    return value("layer", trace.n_layers), value("head", trace.n_heads)


def pick_query(trace: Trace, default: int | None = None) -> int:
    """The query position: the view's `default` (Link's pronoun; else default_query, a decoder's
    last token) until the user picks one or a link gives one; then the same query in every view."""
    n = len(trace.tokens)
    first = default_query(trace) if default is None else default
    url.seed("query", list(range(n)), first, follow=True)
    _int_in_range("query", n, first)
    query = st.selectbox(
        t("ex.query"), range(n), format_func=numbered(trace.tokens), key="query",
        on_change=url.chose, args=("query",),
    )  # fmt: skip
    url.sync("query", first)
    return query


_SIZE_CLASS = "_default_scale_for_"  # session key: the default scale when `key` was last drawn


def pick_scale(n: int, key: str = "wscale", short: str = "fixed") -> str:
    """The colour scale of weight heatmaps (fixed 0-1, head max, power, log), kept in the URL.
    When the input changes size class (a long document pasted after a sentence, or back), the
    scale goes to that class's default: a scale picked for 12 tokens (head max) leaves 4,096
    tokens' rows too faint to see, and a log scale makes a short sentence's map look uniform."""
    default = default_scale(n, short)
    seen = st.session_state.get(_SIZE_CLASS + key)
    if seen is not None and seen != default:  # the input's size class changed
        st.session_state[key] = default
    st.session_state[_SIZE_CLASS + key] = default
    url.seed(key, list(SCALES), default)
    mode = st.segmented_control(
        t("lv.scale"),
        SCALES,
        format_func=lambda m: t(f"lv.scale.{m}"),
        key=key,
        help=t("lv.scale_help"),
    )
    url.sync(key, default)
    return mode or default


def pick_window(n: int, key: str = "window") -> tuple[int, int]:
    """Positions lo..hi-1 to show (end exclusive); all of them where the views need no window."""
    if not needs_window(n):
        return 0, n
    value = st.session_state.get(key)
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and 0 <= value[0] < value[1] < n):
        st.session_state[key] = panels.default_window(n)
    lo, hi = st.slider(t("lv.window"), 0, n - 1, key=key, help=t("lv.window_help"))
    lo, end = panels.window_shown(lo, hi)
    if end != hi + 1:  # cut to the views' most
        st.caption(t("long.window_cut", most=end - lo, lo=lo, hi=end - 1))
    return lo, end


def pick_focus(trace: Trace, key: str = "focus") -> int | None:
    """A query token whose row every thumbnail shows (None: whole heads)."""
    n = len(trace.tokens)
    options = [None, *range(n)]
    url.seed(key, options, None)
    if st.session_state.get(key) not in options:
        st.session_state[key] = None
    focus = st.selectbox(
        t("lv.focus"),
        options,
        format_func=numbered(trace.tokens, none=t("lv.focus_none")),
        key=key,
        help=t("lv.focus_help"),
        placeholder=t("lv.focus_none"),
    )
    url.sync(key, None)
    return focus


def pick_field(trace: Trace) -> str:
    """ "weights | moved": what the view's maps show (moved: each weight times the size of what
    its key sends, attnviz.engine.writes), kept in the URL. A trace without the per-key norms
    (attention weights alone) has weights only."""
    if not trace.has("moved"):
        return "weights"
    return _switch("field", list(FIELDS))


def units(trace: Trace) -> list[str]:
    """The units this trace's views may be over: pieces, words, and whole characters where a
    character can be split into pieces (byte-level BPE, SentencePiece's byte fallback)."""
    from attnviz.measures.pieces import scheme

    special = {p for ps in trace.special.values() for p in ps}
    split = scheme(trace.tokens, special, trace.source) in ("bytes", "metaspace")
    return [u for u in UNITS if u != "char" or split]


def pick_unit(trace: Trace) -> str:
    """ "pieces | words | characters": the tokens every view is over (a trace grouped into words:
    attnviz.measures.words), kept in the URL."""
    return _switch("unit", units(trace))


def _switch(name: str, options: list[str]) -> str:
    """A segmented control over `options` labelled ex.<name>.<option>, kept in the URL; a kept
    value this trace does not offer (characters of a text of words) falls back to the default."""
    url.seed(name, options, url.default(name))
    if st.session_state.get(name) not in options:
        st.session_state[name] = url.default(name)
    picked = st.segmented_control(
        t(f"ex.{name}"), options, format_func=lambda o: t(f"ex.{name}.{o}"), key=name,
        help=t(f"ex.{name}_help"),
    )  # fmt: skip
    url.sync(name, url.default(name))
    return picked or url.default(name)


def selection(**picked: object) -> Selection:
    """A Selection of what the pickers chose, in the page's language."""
    return Selection(lang=lang(), **picked)  # type: ignore[arg-type]


@contextlib.contextmanager
def passing(trace: Trace, field: str = "weights", maps: bool = False):
    """Around a view that reads every head of a long input band by band (the overview, the
    statistics; with field "moved", the statistics of moved too; `maps`: the overview's pooled
    maps of a long input's words): the server makes that pass now, a layer per core
    (attnviz.serve.bandpool), with a spinner after 0.5 s (a pass already made shows nothing).
    Nothing for a short input."""
    if bandpool.pending(trace, field, maps):
        n, heads = len(trace.tokens), trace.n_heads
        with st.spinner(t("long.summarizing", layers=trace.n_layers, heads=heads, n=n),
                        show_time=True):  # fmt: skip
            bandpool.fill(trace, field, maps)
    yield
