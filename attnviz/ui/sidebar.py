"""The sidebar every page shares: language, projector mode, the sentence and its examples."""

from __future__ import annotations

import streamlit as st

from attnviz.i18n import LANGUAGES, examples, translate
from attnviz.ui import projector, url
from attnviz.ui.language import lang, t

PAIR_SEP = "|||"


DEFAULT_TEXT = next(iter(examples("en").values()))


def _apply_example() -> None:
    choice = st.session_state.get("example")
    if choice in examples(lang()):
        text, _, pair = examples(lang())[choice].partition(PAIR_SEP)
        st.session_state["text"] = text
        st.session_state["pair"] = pair
    st.session_state["example"] = None


def sidebar() -> None:
    """Language, the sentence and its examples: shared by every page, kept in the URL. The app
    seeds the language first (`seed_language`, before the page titles are translated)."""
    with st.sidebar:
        st.radio(
            translate("side.language"),
            list(LANGUAGES.values()),
            horizontal=True,
            **url.bound("lang"),
        )
        projector.toggle()
        st.selectbox(
            t("side.example"),
            list(examples(lang())),
            index=None,
            placeholder=t("side.example_pick"),
            key="example",
            on_change=_apply_example,
        )
        st.text_area(
            t("side.text"),
            value=DEFAULT_TEXT,
            help=t("side.text_help"),
            height=100,
            max_chars=20_000,
            **url.bound("text"),
        )
        st.text_input(
            t("side.pair"), value=url.default("pair"), help=t("side.pair_help"), **url.bound("pair")
        )


def text() -> str:
    return st.session_state.get("text", DEFAULT_TEXT)


def pair() -> str | None:
    p = st.session_state.get("pair", "")
    return p if p and p.strip() else None
