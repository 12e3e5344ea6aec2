"""The Flow view (the information-flow graph) on the Pretrained page in AppTest: the edges drawn are
attnviz.flow_graph's at the slider's threshold (from a link too), a head's edge opens the head in
Head detail or Head logits, the CSV, Chinese, the notebook's show(view="flow"), and an encoder
says why it has none."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.views import flow
from attnviz.views.selection import Selection
from tests.apphelpers import app, pretrained_view, specs

PAGE = "app_pages/pretrained.py"
CHAR = "attnviz-char-zh-en"
TEXT = "The animal didn't cross the street because it was too tired. The animal didn't cross the"


@pytest.fixture(scope="module")
def char():
    model = attnviz.load_model(CHAR, device="cpu")
    return model, attnviz.trace_model(model, TEXT)


def open_view(**query: str):
    return pretrained_view(CHAR, TEXT, "flow", **query)


def graph_spec(at) -> dict:
    return next(s for s in specs(at) if "Routes to" in s["layout"]["title"]["text"]
                or "通向" in s["layout"]["title"]["text"])  # fmt: skip


def head_marks(spec: dict) -> list:
    """The customdata of the markers on the heads' edges: [layer, head, src, dst, weight]."""
    found = [d for d in spec["data"] if d.get("mode") == "markers" and d.get("customdata")]
    return found[0]["customdata"]


def test_the_graph_draws_flow_graphs_edges_at_the_sliders_threshold(char) -> None:
    model, trace = char
    for tau, query in ((0.04, {}), (0.1, {"fl_tau": "0.1"})):
        at = open_view(**query)
        assert at.slider(key="fl_tau").value == pytest.approx(tau)
        want = attnviz.flow_graph(model, trace, threshold=tau)
        spec = graph_spec(at)
        assert f"{len(want)} edges" in spec["layout"]["title"]["text"]
        heads = want[want.kind == "head"]
        got = sorted((d[0], d[1], round(d[4], 4)) for d in head_marks(spec))
        assert got == sorted(
            (int(r.dst_layer), int(r.head), round(float(r.weight), 4))
            for r in heads.itertuples(index=False)
        )
        assert "csv_flow" in [b.key for b in at.get("download_button")]
    assert at.query_params["fl_tau"] == "0.1"


def test_a_higher_threshold_is_cut_from_the_graph_made(char) -> None:
    model, trace = char
    at = open_view()
    at.slider(key="fl_tau").set_value(0.2).run()
    assert not at.exception
    want = attnviz.flow_graph(model, trace, threshold=0.2)
    assert f"{len(want)} edges" in graph_spec(at)["layout"]["title"]["text"]


def test_an_edge_picked_opens_its_head_in_head_detail_or_head_logits(char) -> None:
    model, trace = char
    top = flow.head_edges(attnviz.flow_graph(model, trace)).iloc[0]
    at = open_view()
    assert at.selectbox(key="fl_edge").value == 0
    at.segmented_control(key="fl_open").set_value("detail").run()
    assert at.segmented_control(key="view").value == "detail"
    assert (at.query_params["layer"], at.query_params["head"]) == (
        str(int(top.dst_layer)),
        str(int(top["head"])),
    )
    at = open_view()
    at.segmented_control(key="fl_open").set_value("logits").run()
    assert at.segmented_control(key="view").value == "logits"
    # Head logits has no head picker: the link still names the head opened
    assert (at.query_params["layer"], at.query_params["head"]) == (
        str(int(top.dst_layer)),
        str(int(top["head"])),
    )


def test_in_chinese(char) -> None:
    at = open_view(lang="zh")
    assert graph_spec(at)["layout"]["title"]["text"].startswith("通向")
    assert at.slider(key="fl_tau").label == "阈值"


def test_an_encoder_says_why_it_has_no_flow_graph() -> None:
    at = app(PAGE, query={"view": "flow"})  # the bundled MiniLM
    assert not at.exception
    assert "encoder without a language-model head" in at.info[0].value


def test_show_draws_the_same_figure(char) -> None:
    model, trace = char
    drawn = attnviz.show(trace, view="flow", model=model, threshold=0.1)
    want = attnviz.flow_graph(model, trace, threshold=0.1)
    assert f"{len(want)} edges" in drawn.figures[0].layout.title.text
    with pytest.raises(ValueError, match="threshold"):
        Selection(threshold=1.5).check(trace)


def test_a_stopped_graph_says_so_and_builds_again_on_request(char) -> None:
    model, trace = char
    at = open_view()
    # the Stop click's rerun (its button shows only past a second: set as the click sets it)
    at.session_state["fl_stop_button"] = True
    at.slider(key="fl_tau").set_value(0.03).run()  # lower: not cut from the graph made
    assert not at.exception
    assert at.info and "Stopped" in at.info[0].value
    assert not [s for s in specs(at) if "Routes to" in s["layout"]["title"]["text"]]
    at.button(key="fl_again").click().run()
    want = attnviz.flow_graph(model, trace, threshold=0.03)
    assert f"{len(want)} edges" in graph_spec(at)["layout"]["title"]["text"]
