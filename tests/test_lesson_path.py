"""The lesson path (build item 6): classroom pages in teaching order with previous/next links."""

from __future__ import annotations

import re

import pytest

from attnviz.lessons.path import LESSON, Stop, neighbours, total_minutes
from tests.apphelpers import APP_DIR, ROOT, app


def test_lesson_is_45_minutes_and_every_page_exists() -> None:
    assert total_minutes() == 45
    for stop in LESSON:
        assert (APP_DIR / stop.path).exists(), stop.path
    assert neighbours(LESSON[0].name)[0] is None and neighbours(LESSON[-1].name)[2] is None
    with pytest.raises(ValueError, match="lesson path"):
        neighbours("nowhere")
    with pytest.raises(ValueError):
        Stop("x", "pages/x.py", "nav.x", 5, ())


def test_navigation_lists_the_classroom_pages_in_lesson_order() -> None:
    router = (ROOT / "attnviz" / "app.py").read_text()
    listed = re.findall(r'st\.Page\("(app_pages/[a-z_]+\.py)"', router)
    in_nav = [p for p in listed if p in {s.path for s in LESSON}]
    # the BERT page sits under Explore too; the rest appear in the order they are taught
    order = [s.path for s in LESSON if s.name != "pretrained"]
    assert [p for p in in_nav if p != "app_pages/pretrained.py"] == order


@pytest.mark.parametrize("stop", LESSON, ids=[s.name for s in LESSON])
def test_every_lesson_page_links_to_its_neighbours(stop: Stop) -> None:
    before, _, after = neighbours(stop.name)
    at = app(stop.path, query={"lang": "中文"})
    assert not at.exception
    links = [(p.proto.label, p.proto.page) for p in at.get("page_link")]
    expected = []
    if before is not None:
        expected.append(before.name)
    if after is not None:
        expected.append(after.name)
    assert [page for _, page in links][-len(expected) :] == expected
    assert all(label.startswith(("上一页", "下一页")) for label, _ in links[-len(expected) :])
