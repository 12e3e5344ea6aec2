"""What a head writes, on the Pretrained page in AppTest: head logits, the logit lens, compare, the
"weights | moved" and "pieces | words" switches, each from a link, with the engine's numbers and
their CSV; an encoder says why it has no head logits."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1.element_tree import Selectbox

import attnviz
from attnviz.measures.lens import head_logits, logit_lens
from attnviz.views.tokens import shown
from tests.apphelpers import app, heatmap_specs, pretrained_view, specs, titled, z_of

PAGE = "app_pages/pretrained.py"
CHAR = "attnviz-char-zh-en"
TEXT = (
    "The animal didn't cross the street because it was too tired. The animal didn't cross the str"
)
EDIT = TEXT.replace("tired", "wide")


@pytest.fixture(scope="module")
def char():
    model = attnviz.load_model(CHAR, device="cpu")
    return model, attnviz.trace_model(model, TEXT)


def open_view(view: str, **query: str):
    return pretrained_view(CHAR, TEXT, view, **query)


def test_head_logits_draw_every_heads_push_and_a_link_picks_the_token(char) -> None:
    model, trace = char
    at = open_view("logits")
    grid = titled(at, "Each head")
    want = head_logits(model, trace)
    heads = want[want["kind"] == "head"]
    z = z_of(grid)
    for row in heads.itertuples():
        assert z[row.layer, row.head] == pytest.approx(row.logit, abs=1e-5)
    assert shown(want["target"].iloc[0]) in grid["layout"]["title"]["text"]
    assert at.selectbox(key="dla_token").value == ""  # the top next token
    assert "csv_head_logits" in [b.key for b in at.get("download_button")]
    # a link names another token: its logit, and the URL keeps it
    at = open_view("logits", dla_token="a")
    assert "“a”" in titled(at, "Each head")["layout"]["title"]["text"]
    assert at.query_params["dla_token"] == "a"
    # a token the model cannot name in one piece: a warning, the page goes on
    at = open_view("logits", dla_token="tired")
    assert at.warning and "is 5 tokens" in at.warning[0].value


class _Typed(Selectbox):
    """The token box as the browser sends it after typing and Enter ("Add: hungry"): the typed
    text itself, which AppTest's Selectbox cannot send (it knows only the listed options)."""

    @property
    def _widget_state(self) -> WidgetState:
        state = WidgetState()
        state.id = self.id
        state.string_value = self._value
        return state


def typed(at, text: str):
    box = at.selectbox(key="dla_token")
    box.__class__ = _Typed
    return box.set_value(text).run()


def test_a_typed_word_of_several_tokens_picks_its_spelling_that_is_one_token_in_both_languages():
    """'hungry' is 3 tokens for SmolLM2 ('h' 'ung' 'ry'), ' hungry' one: Enter picks ' hungry'
    and says why; the engine's English ("... pass one") is never shown."""
    from attnviz.engine.bundled import registry_file

    if registry_file("smollm2-135m") is None:
        pytest.skip("smollm2-135m is not installed here (`attnviz models smollm2-135m`)")
    for lang, said in (("English", "the same word with a leading space"), ("中文", "加上前导空格")):
        query = {"pick": "smollm2-135m", "text": "After a long walk I was so", "view": "logits"}
        at = app(PAGE, query={**query, "lang": lang})
        typed(at, "hungry")
        assert not at.exception and not at.warning, [w.value for w in at.warning]
        assert at.selectbox(key="dla_token").value == " hungry"
        assert at.query_params["dla_token"] == " hungry"
        assert "␣hungry" in at.selectbox(key="dla_token").options  # the display rule's spelling
        (note,) = [c.value for c in at.caption if said in c.value]
        assert "` ung `" in note and "` ␣hungry `" in note
        titles = [spec["layout"]["title"]["text"] for spec in specs(at)]
        assert any("“␣hungry”" in title for title in titles), titles  # the heads' push on it
        typed(at, "the")  # one token as typed: kept, and ' the' offered beside it
        assert at.selectbox(key="dla_token").value == "the" and not at.warning
        assert "␣the" in at.selectbox(key="dla_token").options


def test_a_token_that_is_one_without_its_space_or_none_says_what_to_do(char) -> None:
    at = open_view("logits")
    typed(at, " 人")  # the space is a token of its own for the character decoder
    assert at.selectbox(key="dla_token").value == "人" and not at.warning
    assert any("without its leading space" in c.value for c in at.caption)
    at = app(PAGE, query={"model": CHAR, "text": TEXT, "view": "logits", "lang": "中文"})
    typed(at, "tired")
    (warning,) = [w.value for w in at.warning]
    assert "5 个词元" in warning and "` ␣tired `" in warning and "` t `" in warning
    assert "pass one" not in warning and not at.exception


def test_the_logit_lens_reads_every_layer(char) -> None:
    model, trace = char
    at = open_view("lens")
    want = logit_lens(model, trace, k=5)
    np.testing.assert_allclose(
        z_of(titled(at, "Logit lens")), want[[f"p_{i}" for i in range(1, 6)]], atol=1e-5
    )
    assert "csv_logit_lens" in [b.key for b in at.get("download_button")]


def test_an_encoder_says_why_it_has_no_head_logits() -> None:
    at = app(PAGE, query={"view": "logits"})  # the bundled MiniLM
    assert not at.exception
    assert "encoder without a language-model head" in at.info[0].value
    assert not at.get("download_button") or "csv_head_logits" not in [
        b.key for b in at.get("download_button")
    ]


def test_compare_ranks_every_head_and_shows_both_maps_and_their_difference() -> None:
    at = open_view("compare")
    assert "Type a second text" in at.info[0].value  # nothing to compare yet
    at = open_view("compare", cmp=EDIT, layer="1", head="2", field="moved")
    grid = titled(at, "How much each head's moved changed")
    assert z_of(grid).shape == (4, 8)
    maps = heatmap_specs(at)[-3:]
    assert [m["layout"]["title"]["text"][:8] for m in maps] == ["Your tex", "Compared", "Compared"]
    assert "csv_compare" in [b.key for b in at.get("download_button")]
    assert any("tokens align" in c.value for c in at.caption)
    # texts whose tokens do not align: statistics only, and the page says so
    at = open_view("compare", cmp="我爱水课，狗咬人和人咬狗")
    assert at.warning and "do not align" in at.warning[0].value
    assert len(heatmap_specs(at)) == 3  # the grid and two maps, no difference


def test_compare_opens_on_the_top_ranked_head_unless_a_link_names_one(char) -> None:
    model, trace = char
    want = attnviz.compare(trace, attnviz.trace_model(model, EDIT), field="weights")
    top = want.sort_values("rank").iloc[0]
    at = open_view("compare", layer="3", head="5")  # a head chosen before; no text yet
    assert (int(top["layer"]), int(top["head"])) != (3, 5)
    at.text_area(key="cmp").set_value(EDIT).run()
    assert not at.exception, [e.value for e in at.exception]
    picked = (at.slider(key="layer").value, at.slider(key="head").value)
    assert picked == (int(top["layer"]), int(top["head"]))
    # a link to a comparison that names a head opens that head
    at = open_view("compare", cmp=EDIT, layer="3", head="5")
    assert (at.slider(key="layer").value, at.slider(key="head").value) == (3, 5)


def test_the_moved_switch_and_the_kobayashi_columns_come_from_the_link(char) -> None:
    _, trace = char
    at = open_view("overview", field="moved")
    assert at.segmented_control(key="field").value == "moved"
    assert any("moved" in s["layout"]["title"]["text"] for s in specs(at))
    help_ = next(c.value for c in at.caption if c.value.startswith("Rows are layers"))
    assert "query × key moved" in help_ and "query × key weights" not in help_  # names moved
    at = open_view("detail", field="moved", layer="2", head="3")
    lt = trace.layers[2]  # a cell the mask hides is blank (NaN), as in every view
    want = np.where(lt.block("mask", 3).numpy(), lt.moved[3].numpy(), np.nan)
    np.testing.assert_allclose(z_of(titled(at, "moved")), want, atol=1e-6)
    at = open_view("stats", field="moved")
    table = at.dataframe[0].value
    assert {"weights on punctuation", "moved on punctuation"} <= set(table.columns)
    # the character model adds no special token: no all-0 columns on them, and a word why
    assert not [c for c in table.columns if "special" in c or "both" in c], list(table.columns)
    assert any("no special tokens" in c.value for c in at.caption)
    assert any("Kobayashi" in c.value for c in at.caption)  # the shares still explained


def test_words_from_the_link_group_every_view() -> None:
    at = open_view("heads", unit="word", layer="1")
    assert at.segmented_control(key="unit").value == "word"
    tokens = heatmap_specs(at)[0]["data"][0]["x"]
    assert any("animal" in tok for tok in tokens)  # words, not characters
    at = open_view("detail", unit="word")
    assert len(heatmap_specs(at)) == 1  # the weights alone: scores do not add up over pieces
    assert any("downloads below hold the trace of pieces" in c.value for c in at.caption)
