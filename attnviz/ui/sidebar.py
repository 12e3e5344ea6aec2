"""The sidebar every page shares: language, projector mode, the sentence and its examples."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.bundled import bundled_models
from attnviz.i18n import LANGUAGES, examples, translate
from attnviz.lessons.path import LESSON
from attnviz.ui import projector, url
from attnviz.ui.language import lang, t
from attnviz.ui.widgets import follow_default

PAIR_SEP = "|||"


DEFAULT_TEXT = url.default("text", lang="en")


def _reads(name: str) -> tuple[str, ...] | None:
    """The languages a bundled model reads (blank: the default one); None for any other name."""
    models = bundled_models()
    found = models[0] if not name else next((m for m in models if m.name == name), None)
    return None if found is None else found.languages


# Pages that read a text of their own (Generate's prompt), not the sidebar's sentence.
OWN_TEXT = ("generate",)


def default_text(page: str = "") -> str:
    """The first example of the UI language; English on a page whose model (typed in `model`, else
    picked in `pick`) reads no Chinese: the bundled all-MiniLM-L6-v2 turns most Chinese characters
    into [UNK]. A model attnviz does not know is taken to read the UI's language."""
    code = lang()
    if page in url.key("model").pages:
        name = str(st.session_state.get("model", url.read("model")) or "").strip()
        if not name:  # the model picked in the list (ui/models.py pick_model)
            name = str(st.session_state.get("pick", url.read("pick")) or "")
        reads = _reads(name)
        if reads is not None and code not in reads:
            code = "en"
    return url.default("text", lang=code)


def _apply_example() -> None:
    choice = st.session_state.get("example")
    if choice in examples(lang()):
        text, _, pair = examples(lang())[choice].partition(PAIR_SEP)
        st.session_state["text"] = text
        st.session_state["pair"] = pair
    st.session_state["example"] = None


def lesson_link(page: str) -> None:
    """Arrived by a lesson's Previous / Next link (?lesson=<page>): the sentence and the second
    one are that page's in the lesson (the Masks page's 我爱水课 and its pair), else the
    defaults, never the last page's. The URL cannot say it: the browser puts the sidebar's
    current sentence back into every address. On a session's first run the widgets start from
    the link anyway."""
    if not url.present("lesson"):
        return
    stop = next((s for s in LESSON if s.name == url.read("lesson")), None)
    if stop is not None and "text" in st.session_state:
        link = dict(stop.link)
        st.session_state["text"] = link.get("text", default_text(page))
        st.session_state["pair"] = link.get("pair", url.default("pair"))
    url.drop("lesson")


def sidebar(page: str = "") -> None:
    """Language, the sentence and its examples: shared by every page (`page`: the one shown, its
    URL path), kept in the URL. The app seeds the language first (`seed_language`, before the
    page titles are translated). The sentence left at its default follows the language."""
    lesson_link(page)
    default = default_text(page)
    follow_default("text", default)
    with st.sidebar:
        st.radio(
            translate("side.language"),
            list(LANGUAGES.values()),
            index=None,  # no default for the URL binding to leave out: lang=English stays
            horizontal=True,
            **url.bound("lang"),
        )
        projector.toggle()
        unused = page in OWN_TEXT  # the page reads its own text: the sentence is kept, greyed
        if unused:
            st.caption(t("side.text_unused"))
        st.selectbox(
            t("side.example"),
            list(examples(lang())),
            index=None,
            placeholder=t("side.example_pick"),
            key="example",
            on_change=_apply_example,
            disabled=unused,
        )
        st.text_area(
            t("side.text"),
            value=default,
            help=t("side.text_help"),
            height=100,
            max_chars=20_000,
            disabled=unused,
            **url.bound("text"),
        )
        st.text_input(
            t("side.pair"),
            value=url.default("pair"),
            help=t("side.pair_help"),
            disabled=unused,
            **url.bound("pair"),
        )


def text() -> str:
    return st.session_state.get("text", DEFAULT_TEXT)


def pair() -> str | None:
    p = st.session_state.get("pair", "")
    return p if p and p.strip() else None
