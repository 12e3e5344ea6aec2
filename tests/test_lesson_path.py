"""The lesson path: classroom pages in teaching order with previous/next links."""

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
    listed = re.findall(r'page\("(app_pages/[a-z_]+\.py)"', router)
    in_nav = [p for p in listed if p in {s.path for s in LESSON}]
    # the Pretrained page sits under Explore too; the rest appear in the order they are taught
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


def test_the_root_app_py_runs_the_same_app_and_its_page_links() -> None:
    # `streamlit run app.py` from the repository root, the command users try first. Streamlit
    # resolves page paths against the main script's folder, which is then the root, not attnviz/.
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.switch_page("attnviz/app_pages/masks.py")
    at.run()
    assert not at.exception
    assert at.title[0].value.startswith("Masks")
    links = [p.proto.page for p in at.get("page_link")]
    assert links[-2:] == ["why_scale", "multihead"]


def test_next_opens_the_next_page_with_only_what_it_means() -> None:
    # Regression: Next x4 from the Masks page's lesson link (我爱水课 and an English pair) reached
    # the Pretrained finale with that sentence and pair: Link two tokens showed "courses" ->
    # "love", not it -> animal. Each Next now opens its page as the lesson's link for it does.
    from urllib.parse import parse_qs

    from attnviz.serve import warmup
    from attnviz.ui.sidebar import DEFAULT_TEXT

    warmup.bundled_model()
    at = app("app_pages/masks.py", query={"text": "我爱水课", "pair": "I really love easy courses"})
    assert at.session_state["text"] == "我爱水课"
    by_name = {s.name: s for s in LESSON}
    for _ in range(4):
        nxt = at.get("page_link")[-1].proto  # what the browser opens: its page and query string
        at.query_params.clear()
        at.query_params.update({k: v[0] for k, v in parse_qs(nxt.query_string).items()})
        at.switch_page(by_name[nxt.page].path)
        at.run()
        assert not at.exception, nxt.page
        if nxt.page == "sharing":
            assert at.session_state["sh_kv"] == 2  # the lesson's own setting for that page
    assert nxt.page == "pretrained" and "lesson" not in at.query_params
    assert at.session_state["text"] == DEFAULT_TEXT and at.session_state["pair"] == ""
    query, key = at.selectbox(key="query"), at.selectbox(key="link_key")
    assert (query.value, key.value) == (10, 2)
    assert query.format_func(query.value) == "10: it" and "animal" in key.format_func(2)
