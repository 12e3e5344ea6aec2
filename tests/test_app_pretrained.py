"""The Pretrained page in AppTest, on the bundled model (real weights, offline)."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.ui.sidebar import DEFAULT_TEXT
from tests.apphelpers import app, heatmap_specs, page_text, specs, z_of

PRETRAINED = "app_pages/pretrained.py"


@pytest.fixture(scope="module")
def bundled():
    from attnviz.engine.hooked import load_model

    return load_model(None, device="cpu")


def test_pretrained_page_loads_the_bundled_model_and_shows_the_overview() -> None:
    at = app(PRETRAINED)
    assert not at.exception, at.exception
    assert not at.error
    images = [s for s in specs(at) if s["data"][0]["type"] == "image"]
    assert len(images) == 1  # every layer x head in one picture


def test_pretrained_heads_view_has_twelve_heatmaps_matching_the_model(bundled) -> None:
    from attnviz.engine.hooked import trace_model

    at = app(PRETRAINED, query={"view": "heads", "layer": "2"})
    assert not at.exception
    maps = heatmap_specs(at)
    assert len(maps) == 12
    ref = trace_model(bundled, DEFAULT_TEXT)
    np.testing.assert_allclose(z_of(maps[0]), ref.layers[2].weights[0].numpy(), atol=1e-5)


def test_scaling_off_shows_the_diff_and_the_embedding_cosine() -> None:
    at = app(PRETRAINED)
    assert not at.metric
    at.toggle(key="wi_scale").set_value(False).run()
    assert not at.exception
    cosine = float(at.metric[0].value)
    assert 0.0 < cosine < 0.999
    titles = [s["layout"]["title"]["text"] for s in heatmap_specs(at)]
    assert any("weights moved" in x for x in titles)
    diff = next(s for s in heatmap_specs(at) if "unchanged weights" in s["layout"]["title"]["text"])
    z = z_of(diff)
    assert np.abs(z).max() > 0.01
    np.testing.assert_allclose(z.sum(-1), 0.0, atol=1e-5)  # both rows sum to 1


def test_a_hidden_token_is_drawn_as_masked_and_the_rows_still_sum_to_one() -> None:
    at = app(PRETRAINED, query={"view": "detail"})
    at.multiselect(key="wi_hide").set_value([2]).run()
    assert not at.exception
    weights = z_of(heatmap_specs(at)[-1])  # detail: scores, logits, weights
    assert np.isnan(weights[:, 2]).all()  # masked: an empty cell, never a weight of 0.00
    np.testing.assert_allclose(np.nansum(weights, -1), 1.0, atol=1e-5)


def test_ablating_a_head_changes_the_embedding() -> None:
    at = app(PRETRAINED)
    at.multiselect(key="wi_silence").set_value(["L0H3", "L5H11"]).run()
    assert not at.exception
    assert float(at.metric[0].value) < 1.0


def test_a_model_that_cannot_load_gives_a_message() -> None:
    at = app(PRETRAINED)
    at.text_input(key="model").set_value("no-such-org/no-such-model-xyz").run()
    assert not at.exception
    assert at.error and "no-such-model-xyz" in at.error[0].value


def test_chinese_text_on_an_english_vocabulary_says_so() -> None:
    at = app(PRETRAINED)
    at.text_area(key="text").set_value("我爱水课").run()
    assert not at.exception
    assert any("[UNK]" in w.value for w in at.warning)


def test_pretrained_page_in_chinese() -> None:
    at = app(PRETRAINED, query={"lang": "中文"})
    assert not at.exception
    assert "预训练" in page_text(at)


def test_link_view_finds_the_head_that_links_it_to_animal_and_opens_it() -> None:
    at = app(PRETRAINED, query={"view": "link", "query": "10", "link_key": "2"})
    assert not at.exception
    table = at.dataframe[0].value
    assert (int(table.iloc[0]["layer"]), int(table.iloc[0]["head"])) == (5, 11)
    grid = z_of(heatmap_specs(at)[0])
    assert grid.shape == (6, 12) and grid.max() == pytest.approx(table.iloc[0]["weight"], abs=1e-4)
    at.button(key="link_open").click().run()
    assert not at.exception
    assert at.slider(key="layer").value == 5 and at.slider(key="head").value == 11
    assert len(heatmap_specs(at)) == 3  # head detail: scores, logits, weights


@pytest.mark.parametrize(
    ("lang", "said"), [("English", "type something"), ("中文", "请在侧边栏输入")]
)
def test_an_empty_sentence_says_to_type_one_where_it_is_seen(lang: str, said: str) -> None:
    """The message was drawn inside the folded "What if…" panel: the page looked blank."""
    at = app(PRETRAINED, query={"text": "", "lang": lang})
    assert not at.exception
    assert any(said in i.value for i in at.info), [i.value for i in at.info]
    for panel in at.get("expander"):
        assert not [i.value for i in panel.info], f"the message is folded in {panel.label!r}"


@pytest.mark.parametrize(("lang", "said"), [("English", "not one of the models"), ("中文", "不在")])
def test_an_unknown_model_name_in_a_link_says_which_names_exist(lang: str, said: str) -> None:
    """?pick=nope fell back to MiniLM without a word: the page says so, names the models it
    has, and works on the default; the note stays until another model is picked."""
    at = app(PRETRAINED, query={"pick": "nope", "lang": lang})
    assert not at.exception and not at.error
    (note,) = [w.value for w in at.warning if said in w.value]
    assert "nope" in note and "smollm2-135m" in note and "gemma-3-270m" in note
    assert specs(at), "the page draws the default model"
    at.run()
    assert any(said in w.value for w in at.warning)
    at.selectbox(key="pick").set_value("attnviz-char-zh-en").run()
    assert not any(said in w.value for w in at.warning)
