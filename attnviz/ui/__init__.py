"""The streamlit layer of attnviz (the only part of the package that imports streamlit).

common: language, sidebar, cached traces, stack controls; explorer: the views the Playground and
BERT pages share.
"""

from attnviz.ui.common import (  # noqa: F401
    DEFAULT_TEXT,
    chart,
    lang,
    pair,
    report_trace_notes,
    run_stack_trace,
    sidebar,
    stack_controls,
    stack_trace,
    t,
    text,
)
