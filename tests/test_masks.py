"""The masks lesson (note 002): the engine's numbers against oracles, and the page in both
languages."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from attnviz.engine.stack import trace_text
from attnviz.lessons import masks
from tests.apphelpers import app, heatmap_specs, page_text, z_of

MASKS_PAGE = "app_pages/masks.py"


def test_causal_mask_matches_sdpa_and_masked_weights_are_exactly_zero() -> None:
    lesson = masks.causal_lesson("The animal didn't cross the street")
    n = len(lesson.tokens)
    assert torch.equal(lesson.mask, masks.causal_mask(n))
    w = lesson.weights["-inf"]
    torch.testing.assert_close(w, lesson.stack_weights)
    assert torch.all(w[~lesson.mask] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(n))
    # oracle: torch's SDPA with is_causal on the same head's q, k, v
    lt = trace_text("The animal didn't cross the street", masks._config(8, 0, causal=True)).layers[
        0
    ]
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        lt.q, lt.k, lt.v, is_causal=True, scale=lt.scale
    )  # [1, n, d_k]
    torch.testing.assert_close(lesson.weights["-inf"] @ lt.v[0], sdpa[0], atol=1e-6, rtol=1e-5)
    assert torch.isinf(lesson.masked_logits[~lesson.mask]).all()
    assert torch.equal(lesson.masked_logits[lesson.mask], lesson.logits[lesson.mask])


def test_note_002s_1e10_masks_nothing_and_minus_1e9_does() -> None:
    lesson = masks.causal_lesson("我爱水课")
    assert lesson.leak["-inf"] == 0.0 and lesson.leak["-1e9"] == 0.0
    assert lesson.leak["1e-10"] > 0.5  # the first token keeps most of its weight on the future
    # 1e-10 is an ordinary logit of about 0: the future keys get exp(0) / Σ, not 0
    as_zero = torch.softmax(lesson.logits.masked_fill(~lesson.mask, 0.0), -1)
    torch.testing.assert_close(lesson.weights["1e-10"], as_zero, atol=1e-6, rtol=0)


def test_padding_hides_pad_keys_and_changes_nothing_for_real_tokens() -> None:
    lesson = masks.padding_lesson("The cat sat on the mat.", "It was tired.")
    assert lesson.tokens[1][-3:] == ["[PAD]"] * 3
    assert lesson.pad_weight == 0.0
    assert lesson.unpadded_gap < 1e-6
    assert lesson.key_mask.tolist()[1] == [True] * 4 + [False] * 3


def test_a_fully_masked_row_is_nan_naively_uniform_with_1e9_and_zero_here() -> None:
    row = masks.empty_row(torch.tensor([0.3, -1.2, 2.0, 0.5]))
    assert torch.isnan(row.naive["-inf"]).all()
    torch.testing.assert_close(row.naive["-1e9"], torch.full((4,), 0.25))
    assert torch.equal(row.attnviz, torch.zeros(4))


def test_cross_attention_shapes_and_sdpa() -> None:
    lesson = masks.cross_lesson("我爱水课", "I really love easy courses")
    assert lesson.shapes == {
        "Q": (4, 8), "K": (5, 8), "V": (5, 8), "QKᵀ": (4, 5), "Z": (4, 8),
    }  # fmt: skip
    assert lesson.sdpa_gap < 1e-5
    with pytest.raises(ValueError, match="second sentence"):
        masks.cross_lesson("我爱水课", "  ")


def test_causal_mask_rejects_zero() -> None:
    with pytest.raises(ValueError):
        masks.causal_mask(0)
    assert masks.additive(torch.tensor([[True, False]])).tolist() == [[0.0, -math.inf]]


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_masks_page_teaches_every_part_in_both_languages(lang: str) -> None:
    at = app(MASKS_PAGE, query={"lang": lang})
    assert not at.exception
    text = page_text(at)
    for part in ("1 ·", "2 ·", "3 ·", "4 ·", "5 ·", "1e-10"):
        assert part in text, part
    assert ("掩码" in text) == (lang == "中文")
    lesson = masks.causal_lesson(at.text_area(key="text").value)
    by_key = {s["layout"]["title"]["text"]: s for s in heatmap_specs(at)}
    assert len(by_key) >= 7
    fill = next(s for title, s in by_key.items() if "1e-10" in title)
    np.testing.assert_allclose(z_of(fill), lesson.weights["1e-10"].numpy(), atol=1e-6)
    m = next(
        s
        for s in heatmap_specs(at)
        if s["data"][0]["zmax"] is not None
        and "M" in s["layout"]["title"]["text"]
        and len(s["data"]) == 2
    )
    assert set(m["data"][1]["text"]) == {"−∞"}
    empty = at.dataframe[0].value
    assert "NaN" in empty.iloc[1].tolist()
    assert set(empty.iloc[-1].tolist()) == {"0.000"}
    # The padding part's second sentence is in the page's language (it stayed English in 中文).
    maps = json.dumps(heatmap_specs(at), ensure_ascii=False)
    assert ("很" in maps, "very" in maps) == ((True, False) if lang == "中文" else (False, True))
    assert ("It was very tired" in text) == (lang == "English")


def test_masks_page_fill_choice_and_pair() -> None:
    at = app(MASKS_PAGE, query={"mk_fill": "-1e9", "pair": "I really love easy courses"})
    assert not at.exception
    text = page_text(at)
    assert "−1e9" in text
    shapes = at.dataframe[1].value
    assert "8 × 5" in shapes.iloc[:, 1].tolist()  # the first 8 tokens read 5 keys
