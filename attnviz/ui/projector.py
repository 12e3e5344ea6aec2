"""Projector mode: a sidebar toggle (in the URL) and the page CSS that goes with it.

Two layers of CSS: BASE always applies and keeps labels from being cut off at any zoom (they wrap,
and narrow columns stack); PROJECTOR grows the UI text and darkens the light grey captions. Tables
(st.dataframe draws on a canvas) keep their size: CSS zoom on them overflowed the page. Figures
grow in ui.chart through attnviz.views.projector.enlarge.
"""

from __future__ import annotations

import streamlit as st

from attnviz.ui.common import t

KEY = "projector"

# Widget labels, select values and buttons wrap instead of ending in "…"; columns narrower than
# a label stack instead of squeezing it (at 1280 px and 150 % zoom a row of six toggles does).
BASE = """
[data-testid="stWidgetLabel"], [data-testid="stWidgetLabel"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
[data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
[data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(11rem, 100%); }
[data-testid="stSelectbox"] [data-baseweb="select"] div { overflow: visible; }
[data-testid="stSelectbox"] [data-baseweb="select"] [value], [data-baseweb="select"] span {
  white-space: normal; text-overflow: clip;
}
button p { white-space: normal; }
[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
[data-testid="stNavSectionHeader"], [data-testid="stNavSectionHeader"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
"""

PROJECTOR = """
html { font-size: 20px; }
.stApp, .stMarkdown p, .stMarkdown li { font-size: 1.05rem; }
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p {
  font-size: 0.95rem !important; color: #262730 !important; opacity: 1 !important;
}
[data-testid="stWidgetLabel"] p { font-size: 1rem !important; }
[data-testid="stMetricValue"] { font-size: 2.2rem; }
[data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(14rem, 100%); }
"""


def on() -> bool:
    return bool(st.session_state.get(KEY, False))


def toggle() -> None:
    """The sidebar toggle, and this run's CSS."""
    st.toggle(t("side.projector"), key=KEY, help=t("side.projector_help"), bind="query-params")
    st.html(f"<style>{BASE}{PROJECTOR if on() else ''}</style>")


def table(
    data,
    hide_index: bool | None = None,
    column_config: dict | None = None,
    wrap: bool = False,
    **kwargs,
):
    """st.dataframe, or in projector mode an HTML st.table: its text grows with the page and
    wraps, where the canvas-drawn dataframe keeps small type and scrolls sideways at 150 % zoom.
    `wrap`: the HTML table always (a table of sentences, which the dataframe cuts off at 1280 px).
    Number formats of `column_config` (NumberColumn(format=...)) apply to both."""
    if not on() and not wrap:
        return st.dataframe(data, hide_index=hide_index, column_config=column_config, **kwargs)
    import pandas as pd

    frame = data.copy() if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    for name, config in (column_config or {}).items():
        fmt = (
            (config or {}).get("type_config", {}).get("format")
            if isinstance(config, dict)
            else None
        )
        if fmt and name in frame:
            frame[name] = frame[name].map(lambda v, f=fmt: f % v)
    shown = frame.style.hide(axis="index") if hide_index else frame
    return st.table(shown)
