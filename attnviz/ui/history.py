"""The browser's Back and Next: one history entry per user step, and a Back that restores it.

Streamlit 1.67 writes the address bar from two sides (its frontend, index.*.js): moving a widget
bound to the URL (bind="query-params") *replaces* the current entry, and every query string the
script sends (an st.query_params write, a bound widget set by code or gone from the page) *pushes*
a new entry unless the run answers Back or Next. So one click pushed two or three entries (the
view, then a picker that left the page), a slider move rewrote the entry Back returns to, and Back
showed states that were never drawn.

attnviz keeps one entry per user step rather than no history at all: a class goes back and forth
between views, and Back is how a browser does that. The rule lives in the browser, the only place
that knows what a user step is: attnviz/assets/js/history.js (a Components v2 module, no iframe,
loaded once a page load) routes every address-bar write of the page through it. The first write
after a click or key press pushes one entry; every other write of that step (its reruns, a page's
first run, the run that answers Back or Next) replaces it. The server's half is in attnviz.ui.url:
the URL holds the whole view (so an entry is a state that can be drawn again), and a Back or Next
run takes every key from the URL (`url.navigating`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import streamlit as st

from attnviz.ui import language, url

NAME = "attnviz.history"
KEY = "attnviz_history"  # its element, hidden: it draws nothing and takes no room
HIDDEN = f"<style>.st-key-{KEY} {{ display: none; }}</style>"  # a style only: no room either
JS = Path(__file__).resolve().parent.parent / "assets" / "js" / "history.js"


@cache
def _source() -> str:
    return JS.read_text(encoding="utf-8")


def _component():
    # Defined again each run (its source read once): defined once a process (functools.cache),
    # the module never reached the browser of a later session (tests/e2e/test_history_browser.py).
    return st.components.v2.component(NAME, js=_source())


def one_entry_per_step() -> None:
    """First thing a run does, before any URL write: on Back or Next let the entry's URL decide
    every key (`url.from_history`) and the language; hide the rule's element (`address_bar`)."""
    url.from_history()
    language.from_history()
    st.html(HIDDEN)


def address_bar() -> None:
    """Last thing a run does (stopped early too): mount the history rule with the URL this run
    ends on. Streamlit's navigation message, on a page's first run, resets the address bar to
    the bound widgets' keys after the run's own writes (view, layer, head... were lost in the
    browser though st.query_params held them); the rule writes them back into the same entry."""
    _component()(key=KEY, data={"query": url.query_string()})
