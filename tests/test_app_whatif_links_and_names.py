"""The what-if panel, links between views, PNG names and the classroom pages' notes, on real
pages."""

from __future__ import annotations

import json

import pytest

from attnviz.i18n import translate
from tests.apphelpers import app, heatmap_specs, image_pixels, specs

WHY_PAGE = "app_pages/why_scale.py"


@pytest.mark.parametrize("text", ["", " ".join(["word"] * 600)], ids=["empty", "truncated"])
def test_why_scale_says_each_note_once(text: str) -> None:
    at = app(WHY_PAGE, query={"text": text})
    assert not at.exception
    notes = [e.value for e in at.get("info")] + [e.value for e in at.get("warning")]
    assert notes, "the page should say something about this text"
    assert len(notes) == len(set(notes)), notes


def test_sharing_diagram_lines_stay_under_labels_and_rows_are_named() -> None:
    at = app("app_pages/sharing.py", query={"lang": "中文", "sh_kv": "2"})
    assert not at.exception
    diagram = next(s for s in specs(at) if s["layout"].get("shapes") and s["data"][0]["mode"])
    assert all(shape.get("layer") == "below" for shape in diagram["layout"]["shapes"])
    rows = diagram["layout"]["yaxis"]["ticktext"]
    assert "头数 h" not in rows and "查询头" in rows


BERT_PAGE = "app_pages/pretrained.py"


def test_link_opens_on_it_to_animal_and_detail_marks_the_pair() -> None:
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
    assert any("animal" in c.value and "from Link two tokens" in c.value for c in at.caption)


def test_whatif_follows_the_open_head_and_says_what_changed() -> None:
    at = app(BERT_PAGE, query={"wi_silence": "L5H11", "view": "detail", "layer": "5", "head": "11"})
    assert not at.exception
    # the compare view is the head open below, not L0H0
    assert any("Layer 5, head 11" in c.value for c in at.caption)
    diff = next(
        s for s in heatmap_specs(at) if "weights − unchanged" in s["layout"]["title"]["text"]
    )
    assert "Layer 5, head 11" in diff["layout"]["title"]["text"]
    # last layer silenced: the panel says no weight can move, and shows what did change
    assert any("last layer" in c.value for c in at.caption)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics[translate("pretrained.cosine")]) < 1.0
    moved = next(v for k, v in metrics.items() if k.startswith("Largest change"))
    assert float(moved.rstrip("%")) > 0
    # the shift grid outlines the silenced head and has no 1e-6 colour bar
    shift = next(
        s for s in heatmap_specs(at) if "How far each head" in s["layout"]["title"]["text"]
    )
    assert shift["data"][0]["zmax"] >= 0.05
    outlines = [r for r in shift["layout"]["shapes"] if r.get("name") == "silenced"]
    assert [(r["y0"] + 0.5, r["x0"] + 0.5) for r in outlines] == [(5, 11)]
    # moving the head below moves the compared head
    at.slider(key="head").set_value(3).run()
    assert not at.exception
    assert any("Layer 5, head 3" in c.value for c in at.caption)


def test_silenced_heads_are_marked_in_the_overview_and_grids() -> None:
    at = app(BERT_PAGE, query={"wi_silence": "L3H1", "view": "heads", "layer": "3"})
    assert not at.exception
    titles = [s["layout"]["title"]["text"] for s in heatmap_specs(at)]
    assert sum("silenced" in title for title in titles) == 1
    assert any(title.startswith("head 1") and "silenced" in title for title in titles)
    at = app(BERT_PAGE, query={"wi_silence": "L3H1", "view": "overview"})
    plain = app(BERT_PAGE, query={"view": "overview"})
    grey = []
    for page in (at, plain):
        image = next(s for s in specs(page) if s["data"][0]["type"] == "image")
        z = image_pixels(image["data"][0]).reshape(-1, 3)  # [pixels, rgb]
        grey.append(int((z == 60).all(axis=1).sum()))
    assert grey[0] > 40 and grey[1] == 0, grey  # the X over the silenced thumbnail


def test_whatif_panel_is_folded_by_default() -> None:
    at = app(BERT_PAGE, query={"wi_silence": "L5H11"})
    assert not at.exception
    # the knobs fold away unless the URL set one; the details fold away always
    labels = {e.label: e for e in at.get("expander")}
    assert labels["What changed, in detail"].proto.expanded is False
    plain = app(BERT_PAGE)
    assert {e.label: e for e in plain.get("expander")}["What if…"].proto.expanded is False


def test_pngs_are_named_by_what_they_hold() -> None:
    at = app(BERT_PAGE, query={"view": "detail", "layer": "5", "head": "11"})
    assert not at.exception
    names = [
        json.loads(c.proto.config)["toImageButtonOptions"]["filename"]
        for c in at.get("plotly_chart")
    ]
    assert {"scores_L5_H11", "logits_L5_H11", "weights_L5_H11"} <= set(names)
    assert "attnviz" not in names
    labels = [d.proto.label for d in at.get("download_button")]
    assert any(".npz" in label for label in labels)
