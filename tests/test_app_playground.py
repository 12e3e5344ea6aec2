"""The Playground page, driven headless through Streamlit's AppTest."""

from __future__ import annotations

import numpy as np
import pytest

from tests.apphelpers import app, z_of
from tests.apphelpers import heatmap_specs as heatmaps


def test_playground_loads_with_one_heatmap_per_head() -> None:
    at = app()
    assert not at.exception
    assert len(heatmaps(at)) == 4  # default: 4 heads


@pytest.mark.parametrize("h", [1, 2, 8, 16])
def test_heads_slider_sets_the_number_of_heatmaps(h: int) -> None:
    at = app()
    at.select_slider(key="heads").set_value(h).run()
    assert not at.exception
    assert len(heatmaps(at)) == h


def test_scaling_toggle_changes_the_weights_in_the_figure() -> None:
    at = app()
    before = z_of(heatmaps(at)[0])
    at.toggle(key="scale").set_value(False).run()
    after = z_of(heatmaps(at)[0])
    assert before.shape == after.shape
    assert not np.allclose(before, after)
    # Unscaled logits are 4x larger at d_k = 16: the rows get sharper.
    assert np.nanmax(after, axis=-1).mean() > np.nanmax(before, axis=-1).mean()


def test_rows_of_the_figure_sum_to_one() -> None:
    z = z_of(heatmaps(app())[0])
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=1e-5)


def test_impossible_combination_gives_a_message_not_a_traceback() -> None:
    at = app()
    at.toggle(key="dk_auto").set_value(False).run()
    at.select_slider(key="heads").set_value(7).run()  # 7 does not divide 64: fine with d_k set
    assert not at.exception and len(heatmaps(at)) == 7
    at.toggle(key="dk_auto").set_value(True).run()  # back to auto: 7 is no longer offered
    assert not at.exception
    assert at.select_slider(key="heads").value in (1, 2, 4, 8, 16, 32)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_gives_a_message(text: str) -> None:
    at = app()
    at.text_area(key="text").set_value(text).run()
    assert not at.exception
    assert len(heatmaps(at)) == 0
    assert any("empty" in i.value for i in at.info)


def test_long_text_is_truncated_with_a_warning() -> None:
    at = app()
    at.text_area(key="text").set_value("word " * 600).run()
    assert not at.exception
    assert any("600" in w.value for w in at.warning)


def test_language_switch_changes_labels() -> None:
    at = app()
    assert at.title[0].value.startswith("Playground")
    at.radio(key="lang").set_value("中文").run()
    assert not at.exception
    assert at.title[0].value.startswith("实验场")
    assert at.select_slider(key="heads").label == "头数 h"


def test_url_parameters_reproduce_the_view() -> None:
    at = app(query={"heads": "2", "scale": "false", "d_model": "128", "lang": "中文"})
    assert not at.exception
    assert at.select_slider(key="heads").value == 2
    assert at.select_slider(key="d_model").value == 128
    assert at.toggle(key="scale").value is False
    assert len(heatmaps(at)) == 2 and at.title[0].value.startswith("实验场")


@pytest.mark.parametrize("token", ["<b>x</b>", "<img src=x onerror=alert(1)>"])
def test_html_in_text_reaches_the_figure_escaped(token: str) -> None:
    at = app()
    at.text_area(key="text").set_value(f"look {token} here").run()
    assert not at.exception
    spec = heatmaps(at)[0]
    # tick labels are the ticktext, or (auto ticks) the categories the browser picks labels from
    ticks = spec["layout"]["xaxis"].get("ticktext") or spec["data"][0]["x"]
    assert "&lt;" in "".join(ticks) and "<" not in "".join(ticks)
    assert "<img" not in json_dump(spec) and "<b>x" not in json_dump(spec)


def json_dump(spec: dict) -> str:
    import json

    return json.dumps(spec, ensure_ascii=False)


@pytest.mark.parametrize("typed", ["zh", "zh-CN", "chinese"])
def test_a_link_with_a_language_code_opens_in_chinese_and_names_it_at_once(typed: str) -> None:
    # The picker writes its label (?lang=中文); a teacher types ?lang=zh. The label is in
    # the link from the first run, not from the first change (a link copied early was English).
    at = app(query={"lang": typed})
    assert not at.exception
    assert at.title[0].value.startswith("实验场") and at.radio(key="lang").value == "中文"
    assert at.query_params.get("lang") in ("中文", ["中文"])
    at.run()
    assert at.query_params.get("lang") in ("中文", ["中文"])
    assert at.title[0].value.startswith("实验场")


@pytest.mark.parametrize("typed", ["en", "xx"])
def test_a_link_with_english_or_an_unknown_language_opens_in_english(typed: str) -> None:
    at = app(query={"lang": typed})
    assert not at.exception and at.title[0].value.startswith("Playground")
    # English is named too: without it the link opens in its reader's language
    assert at.query_params.get("lang") in ("English", ["English"])
    at.run()
    assert at.query_params.get("lang") in ("English", ["English"])


@pytest.mark.parametrize(("locale", "title"), [("zh-CN", "实验场"), ("en-US", "Playground")])
def test_a_plain_link_opens_in_the_browsers_language(monkeypatch, locale, title) -> None:
    monkeypatch.setattr("attnviz.ui.language.browser_locale", lambda: locale)
    at = app()
    assert not at.exception and at.title[0].value.startswith(title)
    named = at.query_params.get("lang")  # the view names its language in the link at once
    assert named in (("中文", ["中文"]) if title == "实验场" else ("English", ["English"])), named
    at.radio(key="lang").set_value("English").run()  # the picker wins from then on
    assert at.title[0].value.startswith("Playground")
    at.run()
    assert at.title[0].value.startswith("Playground")


def test_a_link_that_asks_for_english_wins_over_a_chinese_browser(monkeypatch) -> None:
    monkeypatch.setattr("attnviz.ui.language.browser_locale", lambda: "zh-CN")
    at = app(query={"lang": "en"})
    assert not at.exception and at.title[0].value.startswith("Playground")


CHINESE_DEFAULT = "那只动物没有过马路，因为它太累了。"


@pytest.mark.parametrize(
    "page", [None, "app_pages/masks.py", "app_pages/sharing.py", "app_pages/why_scale.py"]
)
def test_the_default_sentence_follows_the_language(page) -> None:
    # Regression: with ?lang=zh the sidebar sentence stayed English on every page.
    at = app(page, query={"lang": "zh"})
    assert not at.exception and at.session_state["text"] == CHINESE_DEFAULT
    at = app(page)
    assert at.session_state["text"].startswith("The animal didn't cross")


def test_the_pretrained_page_keeps_english_for_a_model_that_reads_no_chinese() -> None:
    # The bundled all-MiniLM-L6-v2 turns most Chinese characters into [UNK]; attnviz's own
    # character model reads both.
    at = app("app_pages/pretrained.py", query={"lang": "zh"})
    assert not at.exception and at.session_state["text"].startswith("The animal didn't")
    at = app("app_pages/pretrained.py", query={"lang": "zh", "model": "attnviz-char-zh-en"})
    assert not at.exception and at.session_state["text"] == CHINESE_DEFAULT


def test_an_untouched_sentence_follows_a_language_switch_and_a_typed_one_stays() -> None:
    at = app()
    at.radio(key="lang").set_value("中文").run()
    assert at.session_state["text"] == CHINESE_DEFAULT
    at.radio(key="lang").set_value("English").run()
    assert at.session_state["text"].startswith("The animal didn't cross")
    at.selectbox(key="example").set_value("我爱水课").run()  # picked, not a default: it stays
    at.radio(key="lang").set_value("中文").run()
    at.radio(key="lang").set_value("English").run()
    assert at.session_state["text"] == "我爱水课"
    at.text_area(key="text").set_value("my own words").run()
    at.radio(key="lang").set_value("中文").run()
    assert not at.exception and at.session_state["text"] == "my own words"
