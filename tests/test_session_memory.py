"""A session keeps no trace once its script has run: the byte-bounded cache is the only holder.

Streamlit keeps each widget's format_func and each fragment's arguments with the session until its
next run, and a closed session for two more minutes (server.disconnectedSessionTTL). A lambda
written in a page script keeps the page's globals (its traces); one over a trace keeps the trace.
Each kept ~90 MiB per session at 512 tokens: a class of 30 peaked at 8.8 GB (bench/load.py
--tokens 512 --sessions 30 --no-baseline), 3.4 GB once nothing held them.
"""

from __future__ import annotations

import gc

import pytest

from attnviz.engine.trace import Trace
from attnviz.ui.caching import trace_cache
from tests.apphelpers import app

VIEWS = ("heads", "overview", "detail", "lines", "rollout", "query", "link", "outputs", "stats")


def live_trace_ids() -> set[int]:
    gc.collect()
    return {id(o) for o in gc.get_objects() if isinstance(o, Trace)}


@pytest.mark.parametrize("page", ["app_pages/pretrained.py", "app_pages/playground.py"])
def test_a_session_holds_no_trace_after_its_runs(page):
    before = live_trace_ids()
    at = app(page)
    at.text_area(key="text").set_value("the quick brown fox jumps over the lazy dog").run()
    if page.endswith("pretrained.py"):
        at.number_input(key="wi_temp").set_value(2.0).run()  # the what-if path: two traces
    for view in VIEWS:
        at.segmented_control(key="view").set_value(view).run()
        assert not at.exception, view
    trace_cache().clear()  # what the cache does when its bytes run out, or the session ends
    kept = live_trace_ids() - before
    assert not kept, f"{len(kept)} trace(s) still held by the session after the cache let go"
    assert at.segmented_control(key="view").value == VIEWS[-1]  # the session is still alive
