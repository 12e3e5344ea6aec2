"""The step-by-step example: its four steps, the column convention, the defaults of note 000."""

import torch
import torch.nn.functional as F

from attnviz.lessons.walkthrough import column_form, walkthrough


def test_default_is_the_notes_four_tokens_with_d_k_4() -> None:
    wt = walkthrough()
    assert wt.tokens == ["我", "爱", "水", "课"]
    assert wt.q.shape == (4, 4) and wt.scores.shape == (4, 4) and wt.scale == 0.5


def test_steps_match_torch_sdpa() -> None:
    for causal in (False, True):
        wt = walkthrough("The animal was too tired", d_k=8, causal=causal)
        ref = F.scaled_dot_product_attention(
            wt.q[None], wt.k[None], wt.v[None], is_causal=causal, scale=wt.scale
        )[0]
        torch.testing.assert_close(wt.z, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(wt.scores, wt.q @ wt.k.T)
        torch.testing.assert_close(wt.weights.sum(-1), torch.ones(len(wt.tokens)))
        if causal:
            assert bool((wt.weights.triu(1) == 0).all())


def test_column_convention_k_transpose_q_gives_the_same_weights() -> None:
    for causal in (False, True):
        wt = walkthrough("我爱水课", causal=causal)
        a, a_soft, diff = column_form(wt)
        torch.testing.assert_close(a, wt.scores.T)  # KᵀQ is (QKᵀ)ᵀ
        assert diff < 1e-6
        torch.testing.assert_close(a_soft.sum(0), torch.ones(4))  # columns sum to 1


def test_unscaled_has_scale_one() -> None:
    wt = walkthrough(use_scale=False, d_k=16)
    assert wt.scale == 1.0
    torch.testing.assert_close(wt.scaled, wt.scores)


def test_long_text_keeps_twelve_tokens_and_says_how_many_there_were() -> None:
    wt = walkthrough("one two three four five six seven eight nine ten eleven twelve thirteen")
    assert len(wt.tokens) == 12 and wt.n_input_tokens == 13
