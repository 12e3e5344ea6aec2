"""Errors a page tells apart by type: an empty input is an EmptyInput (a ValueError) wherever it is
refused, so no page reads an error's text to decide what to say."""

from __future__ import annotations

import pytest

from attnviz import StackConfig, trace_text
from attnviz.engine.errors import EmptyInput
from attnviz.engine.request import TraceRequest
from attnviz.engine.tokenize import tokenize


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_an_empty_text_is_an_empty_input_in_the_stack(text) -> None:
    with pytest.raises(EmptyInput):
        tokenize(text)
    with pytest.raises(EmptyInput):
        trace_text(text, StackConfig(d_model=8, n_heads=2))
    assert issubclass(EmptyInput, ValueError)


def test_an_empty_text_is_an_empty_input_for_a_pretrained_model() -> None:
    from attnviz.engine.hooked import load_model, trace_each, trace_model

    model = load_model()
    for call in (
        lambda: trace_model(model, "  "),
        lambda: trace_each(model, []),
        lambda: trace_each(model, ["a sentence", " "]),
    ):
        with pytest.raises(EmptyInput):
            call()
    with pytest.raises(ValueError, match="positions") as other:
        trace_model(model, "a sentence", mask_tokens=[99])
    assert not isinstance(other.value, EmptyInput)  # any other refusal stays what it was


def test_a_request_is_hashable_and_equal_for_equal_settings() -> None:
    config = StackConfig(d_model=8, n_heads=2)
    a = TraceRequest.of(config, "the cat", None, ablate=[(0, 1)], temperature=1)
    b = TraceRequest.of(config, "the cat", "  ", ablate=((0, 1),), temperature=1.0)
    assert a == b and hash(a) == hash(b) and b.pair is None
    assert a != TraceRequest.of(config, "the cat", ablate=[(0, 2)])
    with pytest.raises(TypeError, match="string"):
        TraceRequest(config, 3)  # type: ignore[arg-type]


def test_a_text_over_the_limit_is_refused_in_the_pages_language(monkeypatch) -> None:
    """The engine's text stays English; the facts travel as fields, so the page says it in
    Chinese with the same numbers (attnviz.ui.language.said)."""
    from attnviz.engine import budget as budget_module
    from attnviz.engine import validate

    monkeypatch.setenv("ATTNVIZ_MAX_TEXT_CHARS", "10")
    budget_module.budget.cache_clear()
    try:
        with pytest.raises(ValueError) as caught:
            validate.text("text", "a" * 12)
    finally:
        monkeypatch.delenv("ATTNVIZ_MAX_TEXT_CHARS")
        budget_module.budget.cache_clear()
    assert str(caught.value) == (
        "text has 12 characters; this server takes at most 10 (ATTNVIZ_MAX_TEXT_CHARS): shorten it"
    )
    assert "12 个字符" in caught.value.args[0].in_language("zh")
