"""The classroom pages in teaching order: a 45-minute lesson built from the five notes.

One entry per page: its file, its navigation title key, the minutes it takes in the lesson, the
notes it teaches from and what its link in the lesson sets up (the README's lesson plan). The
pages' previous/next links follow this order and open each page as that link does: only what
that page means, never the last page's sentence. No streamlit here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stop:
    """One page of the lesson."""

    name: str  # short id, also the end of the page's URL path
    path: str  # the page's script, as st.Page knows it
    title_key: str  # i18n key of its navigation title
    minutes: int  # time it takes in the 45-minute lesson
    notes: tuple[str, ...]  # seed notes it teaches from ("000" ... "004")
    # URL keys its link in the lesson sets (attnviz.ui.url's names); the sentence and the second
    # sentence are the defaults unless named here
    link: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.path.startswith("app_pages/") or not self.path.endswith(".py"):
            raise ValueError(f"path={self.path!r} must be a script under app_pages/")
        if self.minutes < 1:
            raise ValueError(f"minutes={self.minutes} must be at least 1")


LESSON = (
    Stop("step_by_step", "app_pages/step_by_step.py", "nav.steps", 10, ("000", "001", "004")),
    Stop("why_scale", "app_pages/why_scale.py", "nav.why_scale", 6, ("000", "004")),
    Stop("masks", "app_pages/masks.py", "nav.masks", 7, ("002", "004"),
         (("text", "我爱水课"), ("pair", "I really love easy courses"))),
    Stop("multihead", "app_pages/multihead.py", "nav.multihead", 7, ("000", "001", "003")),
    Stop("sharing", "app_pages/sharing.py", "nav.sharing", 4, ("003",), (("sh_kv", "2"),)),
    Stop("positions", "app_pages/positions.py", "nav.positions", 6, ("002", "003", "004")),
    Stop("pretrained", "app_pages/pretrained.py", "nav.pretrained", 5, ("004",),
         (("view", "link"),)),
)  # fmt: skip


def neighbours(name: str) -> tuple[Stop | None, Stop, Stop | None]:
    """(previous, this, next) stop of the lesson; None at either end."""
    names = [stop.name for stop in LESSON]
    if name not in names:
        raise ValueError(f"page {name!r} is not on the lesson path: pick one of {names}")
    i = names.index(name)
    return (
        LESSON[i - 1] if i > 0 else None,
        LESSON[i],
        LESSON[i + 1] if i + 1 < len(LESSON) else None,
    )


def total_minutes() -> int:
    return sum(stop.minutes for stop in LESSON)
