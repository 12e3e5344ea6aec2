"""Issue 9 defects 6, 9, 10, 11, 12: each test fails on the main they were filed against."""

from __future__ import annotations

import pytest

from tests.apphelpers import app, heatmap_specs, specs

WHY_PAGE = "app_pages/why_scale.py"


@pytest.mark.parametrize("text", ["", " ".join(["word"] * 600)], ids=["empty", "truncated"])
def test_defect_10_why_scale_says_each_note_once(text: str) -> None:
    at = app(WHY_PAGE, query={"text": text})
    assert not at.exception
    notes = [e.value for e in at.get("info")] + [e.value for e in at.get("warning")]
    assert notes, "the page should say something about this text"
    assert len(notes) == len(set(notes)), notes


def test_defect_9_sharing_diagram_lines_stay_under_labels_and_rows_are_named() -> None:
    at = app("app_pages/sharing.py", query={"lang": "中文", "sh_kv": "2"})
    assert not at.exception
    diagram = next(s for s in specs(at) if s["layout"].get("shapes") and s["data"][0]["mode"])
    assert all(shape.get("layer") == "below" for shape in diagram["layout"]["shapes"])
    rows = diagram["layout"]["yaxis"]["ticktext"]
    assert "头数 h" not in rows and "查询头" in rows


BERT_PAGE = "app_pages/bert.py"


def test_defect_12_link_opens_on_it_to_animal_and_detail_marks_the_pair() -> None:
    at = app(BERT_PAGE, query={"view": "link"})
    assert not at.exception
    query, key = at.selectbox(key="query"), at.selectbox(key="link_key")
    assert query.value == 10 and key.value == 2, (query.value, key.value)  # it → animal
    assert at.query_params["query"] == ["10"] or at.query_params["query"] == "10"
    at.button(key="link_open").click().run()
    assert not at.exception
    assert at.session_state["view"] == "detail"
    maps = [s for s in heatmap_specs(at) if s["layout"].get("shapes")]
    assert len(maps) == 3
    for spec in maps:
        rects = spec["layout"]["shapes"]
        rows = [r for r in rects if r["x0"] == -0.5]  # spans every key: the query row
        cols = [r for r in rects if r["y0"] == -0.5]  # spans every query: the key column
        assert rows[0]["y0"] == 9.5 and cols[0]["x0"] == 1.5
    assert any("animal" in c.value for c in at.caption)
