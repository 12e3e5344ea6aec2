"""Controls for long inputs, shared by the explorer's views: colour scale, token window, focus."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.trace import Trace
from attnviz.ui.common import numbered, t, url_seed, url_sync
from attnviz.views import panels as views
from attnviz.views.colour import SCALES
from attnviz.views.panels import LONG, default_scale


def pick_scale(n: int, key: str = "wscale", short: str = "fixed") -> str:
    """The colour scale of weight heatmaps (fixed 0-1, head max, power, log), kept in the URL."""
    default = default_scale(n, short)
    url_seed(key, list(SCALES), default)
    mode = st.segmented_control(
        t("lv.scale"),
        SCALES,
        format_func=lambda m: t(f"lv.scale.{m}"),
        key=key,
        help=t("lv.scale_help"),
    )
    url_sync(key, default)
    return mode or default


def colour_kwargs(matrix, mode: str, value: str | None = None) -> dict:
    return views.colour_kwargs(matrix, mode, t, value)


def pick_window(n: int, key: str = "window") -> tuple[int, int]:
    """Positions lo..hi-1 to show (end exclusive); the whole input for short ones."""
    if n <= LONG:
        return 0, n
    value = st.session_state.get(key)
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and 0 <= value[0] < value[1] < n):
        st.session_state[key] = (0, n - 1)
    lo, hi = st.slider(t("lv.window"), 0, n - 1, key=key, help=t("lv.window_help"))
    return lo, hi + 1


def pick_focus(trace: Trace, key: str = "focus") -> int | None:
    """A query token whose row every thumbnail shows (None: whole heads)."""
    n = len(trace.tokens)
    options = [None, *range(n)]
    url_seed(key, options, None)
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
    url_sync(key, None)
    return focus
