"""Projector mode: a sidebar toggle (in the URL) and the page CSS that goes with it.

Two layers of CSS: BASE always applies and keeps labels from being cut off at any zoom (they wrap,
and narrow columns stack); PROJECTOR grows the UI text and darkens the light grey captions. Tables
(st.dataframe draws on a canvas) keep their size: CSS zoom on them overflowed the page; in
projector mode ui.widgets.table draws an HTML table instead. Figures grow in ui.widgets.chart
through attnviz.views.projector.enlarge.
"""

from __future__ import annotations

import streamlit as st

from attnviz.ui import url
from attnviz.ui.language import lang, t

KEY = "projector"

# Widget labels, select values and buttons wrap instead of ending in "…"; columns narrower than
# a label stack instead of squeezing it (at 1280 px and 150 % zoom a row of six toggles does).
BASE = """
[data-testid="stWidgetLabel"], [data-testid="stWidgetLabel"] * {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
}
[data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
[data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(11rem, 100%); }
[class*="st-key-matrices_"] [data-testid="stHorizontalBlock"] > [data-testid="stColumn"] {
  min-width: min(24rem, 100%);
}
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

# A file uploader's own lines ("Drag and drop file here", "Limit 1MB per file • TXT") are
# Streamlit's English and cannot be translated: in Chinese they are hidden, and each uploader's
# label says its limit and file type in Chinese (its Upload button stays Streamlit's).
UPLOADER_ZH = '[data-testid="stFileUploaderDropzoneInstructions"] { display: none; }'


def on() -> bool:
    return bool(st.session_state.get(KEY, False))


def toggle() -> None:
    """The sidebar toggle, and this run's CSS."""
    st.toggle(t("side.projector"), help=t("side.projector_help"), **url.bound(KEY))
    chinese = UPLOADER_ZH if lang() == "zh" else ""
    st.html(f"<style>{BASE}{chinese}{PROJECTOR if on() else ''}</style>")
