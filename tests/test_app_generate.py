"""The Generate page through AppTest: a link reopens the same run at the same step, the knobs from
the link reach the engine, and bad links or names get a message instead of a traceback."""

from __future__ import annotations

import re

import pytest

from attnviz.engine.generate import TRAINED_DECODER, Sampling, WhatIf, generate
from attnviz.engine.hooked import load_model
from attnviz.views.tokens import piece, shown
from tests.apphelpers import app, page_text

PAGE = "app_pages/generate.py"
# These tests are about the page, on the small decoder attnviz trained: the page would open on
# SmolLM2 or Gemma 3 where `make llms` installed them (tests/test_app_llms.py).
CHAR = {"g_pick": TRAINED_DECODER}


def test_a_link_reopens_the_same_run_at_its_step() -> None:
    query = {**CHAR, "g_n": "5", "g_step": "2", "g_greedy": "false", "g_seed": "9", "g_topk": "50",
             "g_temp": "2.0", "g_ablate": ["L0H1", "L2H3"]}  # fmt: skip
    at = app(PAGE, query)
    assert not at.exception
    assert at.slider(key="g_step").value == 2
    assert at.session_state["g_ablate"] == ["L0H1", "L2H3"]
    run = generate(
        load_model(TRAINED_DECODER, device="cpu"), "The cat sat on the mat and", 5,
        Sampling(greedy=False, top_k=50, seed=9),
        WhatIf(temperature=2.0, ablate=frozenset({(0, 1), (2, 3)})),
    )  # fmt: skip
    metrics = [m.value for m in at.metric]  # whitespace drawn (␣, ⏎): a space is no blank
    assert metrics[0] == shown(run.texts[run.steps[2].position])
    assert metrics[1] == shown(run.texts[run.steps[2].position + 1])
    assert len(at.get("plotly_chart")) == 3


def test_the_sidebar_sentence_is_greyed_here_and_heads_carry_no_position() -> None:
    # Regression: the sidebar's Sentence box looked like it steered the page (it has its own
    # prompt), and the step chart's heads read "44: L11H0".
    import json

    at = app(PAGE, {**CHAR, "g_n": "3"})
    assert not at.exception
    assert at.text_area(key="text").disabled and at.text_input(key="pair").disabled
    assert any("own prompt" in c.value for c in at.sidebar.caption)
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (rows,) = [c for c in charts if c["data"][0].get("type") == "heatmap"]  # the step's rows
    heads = rows["data"][0]["y"]
    assert heads[:2] == ["L0H0", "L0H1"], heads[:3]
    keys = rows["data"][0]["x"]
    assert re.fullmatch(r"0: [^:]+", keys[0]) and keys[0].count(":") == 1, keys[:3]
    other = app("app_pages/masks.py")
    assert not other.text_area(key="text").disabled


def test_bad_links_and_names_get_messages() -> None:
    at = app(PAGE, {**CHAR, "g_n": "100000", "g_stemp": "nan"})  # out of range: the defaults
    assert not at.exception and at.slider(key="g_n").value == 16
    at = app(PAGE, {**CHAR, "g_prompt": "word " * 600})
    assert not at.exception
    assert "reads at most" in " ".join(e.value for e in at.error)
    at = app(PAGE, {**CHAR, "g_prompt": "   "})
    assert not at.exception and "prompt is empty" in " ".join(e.value for e in at.error)
    # in Chinese, the engine's refusals in Chinese, with the same numbers
    at = app(PAGE, {**CHAR, "g_prompt": "   ", "lang": "中文"})
    assert not at.exception and "提示为空" in " ".join(e.value for e in at.error)
    at = app(PAGE, {**CHAR, "g_prompt": "word " * 600, "lang": "中文"})
    said = " ".join(e.value for e in at.error)
    assert "最多读 256 个" in said and "more were asked" not in said
    at = app(PAGE, {**CHAR, "g_model": "/no/such/folder", "g_prompt": "my own prompt",
                    "g_ablate": ["L0H1"]})  # fmt: skip
    assert not at.exception and at.error
    assert "Traceback" not in page_text(at)
    # the prompt and settings stay on the page after a bad model name: nothing typed is lost
    assert at.text_area(key="g_prompt").value == "my own prompt"
    assert at.session_state["g_ablate"] == ["L0H1"] and not at.get("plotly_chart")
    at.text_input(key="g_model").set_value("").run()  # back to the trained decoder
    assert not at.exception and at.text_area(key="g_prompt").value == "my own prompt"
    assert at.session_state["g_ablate"] == ["L0H1"] and at.get("plotly_chart")


def test_the_default_prompt_follows_the_language() -> None:
    # Regression: with ?lang=zh Generate's prompt stayed English.
    at = app(PAGE, {**CHAR, "lang": "zh", "g_n": "2"})
    assert not at.exception and at.text_area(key="g_prompt").value == "床前明月光，"
    at.radio(key="lang").set_value("English").run()
    assert at.text_area(key="g_prompt").value == "The cat sat on the mat and"
    at.text_area(key="g_prompt").set_value("我爱").run()
    at.radio(key="lang").set_value("中文").run()
    assert not at.exception and at.text_area(key="g_prompt").value == "我爱"


def _generated(at) -> str:
    """The page's "Generated" line as a reader sees it (Markdown's backslash escapes removed)."""
    line = next(m.value for m in at.markdown if "**Generated (" in m.value)
    return re.sub(r"\\(.)", r"\1", line.split(":** ", 2)[-1])


@pytest.mark.parametrize(
    "knobs", [{}, {"g_scale": "false", "g_ablate": ["L0H0", "L0H6"]}], ids=["default", "what-if"]
)
def test_every_generated_token_is_shown_whitespace_drawn(knobs) -> None:
    # Regression: the default run showed 12 of its 16 tokens (4 were spaces, which Markdown drops),
    # and a what-if run of spaces and line breaks read "Generated:" and nothing. The character
    # model's tokens are one character each: one drawn character a token.
    at = app(PAGE, {**CHAR, **knobs})
    assert not at.exception
    run = generate(
        load_model(TRAINED_DECODER, device="cpu"), "The cat sat on the mat and", 16,
        Sampling(), WhatIf(use_scale="g_scale" not in knobs,
                           ablate=frozenset({(0, 0), (0, 6)} if knobs else ())),
    )  # fmt: skip
    made = run.texts[run.n_prompt :]
    assert len(made) == 16 and any(not t.strip() for t in made)  # whitespace among them
    drawn = _generated(at)
    pairs = zip(run.tokens[run.n_prompt :], made, strict=True)
    assert drawn == "".join(shown(piece(tok, text)) for tok, text in pairs)
    assert len(drawn) == 16 and not any(c.isspace() for c in drawn), drawn
    assert "16 tokens" in next(m.value for m in at.markdown if "**Generated (" in m.value)


def test_whitespace_is_drawn_and_sentencepiece_keeps_its_word_space() -> None:
    assert shown(" a\nb\tc\u3000") == "␣a⏎b⇥c␣"
    assert shown("床前") == "床前"
    assert piece("▁the", "the") == " the" and piece("Ġthe", " the") == " the"
    assert piece("the", "the") == "the"
