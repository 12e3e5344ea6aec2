"""The streamlit layer of attnviz: the only part of the package (with the page scripts) that
imports streamlit. Pages use `from attnviz import ui` and call the names below; the modules
behind them: language, url (every URL key), sidebar, widgets, playground, lesson, projector,
models (loading a model, its cached traces), pretrained, whatif, caching, explorer/, launch.
"""

from attnviz.ui.language import input_problem, lang, localized, said, t
from attnviz.ui.lesson import (
    cached_order_check,
    cached_sharing_check,
    cached_sweeps,
    cached_walkthrough,
    lesson_nav,
    page_file,
)
from attnviz.ui.playground import run_stack_trace, stack_controls
from attnviz.ui.sidebar import pair, sidebar, text
from attnviz.ui.widgets import (
    EXACT,
    chart,
    choice_slider,
    distinct_labels,
    grid,
    kv_slider,
    matrix_columns,
    numbered,
    numbers,
    report_trace_notes,
    table,
    url_select,
)

__all__ = [
    "EXACT", "cached_order_check", "cached_sharing_check", "cached_sweeps", "cached_walkthrough",
    "chart",
    "choice_slider", "distinct_labels", "grid", "input_problem", "kv_slider", "lang", "lesson_nav",
    "localized", "matrix_columns", "numbered", "numbers", "page_file", "pair", "report_trace_notes",
    "run_stack_trace", "said",
    "sidebar", "stack_controls", "t", "table", "text", "url_select",
]  # fmt: skip
