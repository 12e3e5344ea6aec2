"""The lesson path's previous / next links at the bottom of every classroom page."""

from __future__ import annotations

import streamlit as st

from attnviz.lessons.path import LESSON, neighbours
from attnviz.ui.common import t


def lesson_nav(name: str) -> None:
    """A divider, "lesson i of n", and links to the previous and next page of the lesson."""
    before, here, after = neighbours(name)
    st.divider()
    i = LESSON.index(here) + 1
    c1, c2, c3 = st.columns([2, 3, 2], vertical_alignment="center")
    if before is not None:
        c1.page_link(before.path, label=t("lesson.prev", page=t(before.title_key)), icon="⬅️")
    c2.caption(t("lesson.where", i=i, n=len(LESSON), minutes=here.minutes))
    if after is not None:
        c3.page_link(after.path, label=t("lesson.next", page=t(after.title_key)), icon="➡️")
