"""The lesson path's previous / next links at the bottom of every classroom page."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from attnviz.engine.config import StackConfig
from attnviz.lessons.path import LESSON, neighbours
from attnviz.ui.language import t

PACKAGE = Path(__file__).resolve().parents[1]  # where app.py and app_pages/ live


def page_file(path: str) -> str:
    """A page script ("app_pages/masks.py") as an absolute path, for st.Page and st.page_link:
    the same page whichever app.py Streamlit runs (the package's, or the repository root's)."""
    return str(PACKAGE / path)


def lesson_nav(name: str) -> None:
    """A divider, "lesson i of n", and links to the previous and next page of the lesson. Each
    opens its page as the lesson's link for it does (Stop.link) and names that stop
    (?lesson=<page>): the sidebar starts the page from its own sentence (sidebar.lesson_link)."""
    before, here, after = neighbours(name)
    st.divider()
    i = LESSON.index(here) + 1
    c1, c2, c3 = st.columns([2, 3, 2], vertical_alignment="center")
    if before is not None:
        c1.page_link(
            page_file(before.path), label=t("lesson.prev", page=t(before.title_key)), icon="⬅️",
            query_params={**dict(before.link), "lesson": before.name},
        )  # fmt: skip
    c2.caption(t("lesson.where", i=i, n=len(LESSON), minutes=here.minutes))
    if after is not None:
        c3.page_link(
            page_file(after.path), label=t("lesson.next", page=t(after.title_key)), icon="➡️",
            query_params={**dict(after.link), "lesson": after.name},
        )  # fmt: skip


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_walkthrough(
    text: str, d_k: int, use_scale: bool, causal: bool, temperature: float = 1.0
):
    from attnviz.lessons.walkthrough import walkthrough

    return walkthrough(text, d_k=d_k, use_scale=use_scale, causal=causal, temperature=temperature)


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_sharing_check(text: str, config: StackConfig):
    from attnviz.lessons.sharing import sharing_check

    return sharing_check(text, config)


@st.cache_resource(show_spinner=False)
def cached_sweeps() -> tuple[list[dict], list[dict]]:
    """The variance and saturation sweeps of the Why-√d_k page: deterministic, computed once."""
    from attnviz.lessons.scaling import saturation_sweep, variance_sweep

    return variance_sweep(n_samples=20_000), saturation_sweep()


@st.cache_resource(max_entries=16, show_spinner=False)
def cached_order_check(text_a: str, text_b: str, config: StackConfig):
    from attnviz.lessons.positions import order_blindness

    return order_blindness(text_a, text_b, config)
