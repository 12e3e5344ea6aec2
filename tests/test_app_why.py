"""Why here on the Pretrained page in AppTest: one head's logit split into query-side x key-side
parts, from a link and from Head detail's and Link's buttons, with the engine's numbers, the
sentence, the per-key bars, the CSV, Chinese, a masked key refused and an encoder served."""

from __future__ import annotations

import numpy as np
import pytest

import attnviz
from attnviz.measures.qk import qk_attribution
from attnviz.views.why import pair_matrix
from tests.apphelpers import app, pretrained_view, titled, z_of

PAGE = "app_pages/pretrained.py"
CHAR = "attnviz-char-zh-en"
TEXT = "the cat sat on the mat and the cat sat on"


@pytest.fixture(scope="module")
def char():
    model = attnviz.load_model(CHAR, device="cpu")
    return model, attnviz.trace_model(model, TEXT)


def open_why(**query: str):
    return pretrained_view(CHAR, TEXT, "why", **query)


def test_a_link_opens_a_cell_split_with_the_engines_numbers(char) -> None:
    model, trace = char
    at = open_why(layer="2", head="1", query="30", why_key="27")
    want = qk_attribution(model, trace, 2, 1, 30, key=27)
    grid = titled(at, "Query side")
    z = np.asarray(z_of(grid), dtype=float)
    assert z.sum() == pytest.approx(want.attrs["logit"], abs=1e-3)  # the map adds up
    assert f"{want.attrs['logit']:.3f}" in grid["layout"]["title"]["text"]
    sentence = next(m.value for m in at.markdown if "attends from" in m.value)
    assert "L2H1" in sentence and "of the logit" in sentence
    assert at.query_params["why_key"] == "27"
    assert "csv_why" in [b.key for b in at.get("download_button")]
    keys = titled(at, "The row's strongest keys")
    diamonds = next(d for d in keys["data"] if d.get("type") == "scatter")
    logits = trace.layers[2].block("logits", 1, [30])[0]
    for x, y in zip(diamonds["x"], diamonds["y"], strict=True):
        assert y == pytest.approx(float(logits[int(x.split(":")[0])]), abs=1e-3)


def test_the_default_key_is_the_heads_strongest_and_chinese_reads(char) -> None:
    model, trace = char
    at = open_why(layer="1", head="0", query="12", lang="zh")
    best = int(trace.layers[1].block("weights", 0, [12])[0].argmax())
    assert at.selectbox(key="why_key").value == -1
    sentence = next(m.value for m in at.markdown if "看向" in m.value)
    assert f"（{best}）" in sentence
    assert titled(at, "查询侧")  # the map's title in Chinese


def test_a_link_to_a_masked_key_opens_the_heads_strongest_instead() -> None:
    at = open_why(layer="1", head="0", query="3", why_key="9")  # a later key: causal
    assert at.selectbox(key="why_key").value == -1  # the picker offers the keys the row sees
    assert at.selectbox(key="why_key").options[1:] == ["0: [BOS]", "1: t", "2: h", "3: e"]
    assert any("attends from" in m.value for m in at.markdown)


def test_detail_and_link_open_why_here(char) -> None:
    at = app(PAGE, query={"model": CHAR, "text": TEXT, "view": "detail", "layer": "2",
                          "head": "1"})  # fmt: skip
    at.button(key="detail_why").click().run()
    assert not at.exception
    assert at.session_state["view"] == "why"
    assert any("attends from" in m.value for m in at.markdown)
    at = app(PAGE, query={"model": CHAR, "text": TEXT, "view": "link"})
    at.button(key="link_why").click().run()
    assert at.session_state["view"] == "why" and not at.exception


def test_an_encoder_is_split_too() -> None:
    at = app(PAGE, query={"text": "The cat sat on the mat.", "view": "why", "layer": "3",
                          "head": "2", "query": "3"})  # fmt: skip
    assert not at.exception, [e.value for e in at.exception]
    assert any("attends from" in m.value for m in at.markdown)
    grid = titled(at, "Query side")
    m, rows, cols = pair_matrix(qk_attribution(attnviz.load_model(None), attnviz.trace_model(
        attnviz.load_model(None), "The cat sat on the mat."), 3, 2, 3).assign(
        q_part=lambda d: d.q_kind, k_part=lambda d: d.k_kind))  # fmt: skip
    assert np.asarray(z_of(grid), dtype=float).sum() == pytest.approx(m.sum(), abs=1e-3)
