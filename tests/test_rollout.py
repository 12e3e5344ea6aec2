"""rollout: attention composed across layers, checked against an explicit loop of sums."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz import StackConfig, load_model, rollout, trace_model, trace_text

ATOL = 1e-5


def loop_rollout(trace, residual: bool) -> list[list[list[float]]]:
    """The definition written out with Python loops and float arithmetic (no torch matmul)."""
    out = []
    acc = None
    for lt in trace.layers:
        w = lt.weights.tolist()  # [head, q, k] as nested lists
        n_heads, n = len(w), len(w[0])
        a = [
            [sum(w[h][i][j] for h in range(n_heads)) / n_heads for j in range(n)] for i in range(n)
        ]
        if residual:
            a = [[0.5 * a[i][j] + (0.5 if i == j else 0.0) for j in range(n)] for i in range(n)]
            a = [[v / sum(row) for v in row] for row in a]
        if acc is not None:
            a = [[sum(a[i][m] * acc[m][j] for m in range(n)) for j in range(n)] for i in range(n)]
        acc = a
        out.append(acc)
    return out


def check(trace, residual: bool) -> torch.Tensor:
    got = rollout(trace, residual=residual)  # [layer, q, k]
    n = len(trace.tokens)
    assert got.shape == (trace.n_layers, n, n)
    assert torch.isfinite(got).all()
    want = torch.tensor(loop_rollout(trace, residual))
    assert torch.allclose(got, want, atol=ATOL), (got - want).abs().max()
    return got


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("residual", [True, False])
def test_toy_stack_matches_the_loop(causal: bool, residual: bool) -> None:
    config = StackConfig(d_model=32, n_heads=4, n_layers=3, causal=causal, seed=3)
    trace = trace_text("the quick brown fox jumps over the lazy dog again", config)
    got = check(trace, residual)
    assert torch.allclose(got.sum(-1), torch.ones(got.shape[:2]), atol=ATOL)
    if causal:  # nothing flows from a later token to an earlier one, at any depth
        assert (got.triu(1) == 0).all()
    else:
        assert (got.triu(1) > 0).any()


def test_residual_keeps_the_token_itself() -> None:
    config = StackConfig(d_model=16, n_heads=2, n_layers=2, seed=1)
    trace = trace_text("one two three four five", config)
    first = rollout(trace)[0]  # [q, k]
    w_bar = trace.layers[0].weights.mean(0)  # [q, k]
    # one layer: 0.5 W̄ + 0.5 I has rows summing to 1 already
    assert torch.allclose(first, 0.5 * w_bar + 0.5 * torch.eye(5), atol=ATOL)
    assert (first.diagonal() >= 0.5 - ATOL).all()


@pytest.fixture(scope="module")
def minilm():
    return load_model()


@pytest.mark.parametrize("residual", [True, False])
def test_bundled_model_matches_the_loop(minilm, residual: bool) -> None:
    trace = trace_model(minilm, "The animal didn't cross the street because it was tired")
    got = check(trace, residual)
    assert torch.allclose(got.sum(-1), torch.ones(got.shape[:2]), atol=ATOL)


def test_bundled_model_with_masked_tokens_matches_the_loop(minilm) -> None:
    # A masked key gets weight exactly 0 from every query, at every layer, so it feeds nothing
    # except itself (through the residual).
    trace = trace_model(minilm, "The cat sat on the mat.", mask_tokens=(2, 3))
    got = check(trace, residual=True)
    assert torch.allclose(got.sum(-1), torch.ones(got.shape[:2]), atol=ATOL)
    others = [i for i in range(len(trace.tokens)) if i not in (2, 3)]
    assert (got[:, others][:, :, [2, 3]] == 0).all()
    plain = check(trace, residual=False)
    assert (plain[..., [2, 3]] == 0).all()


def test_cross_attention_is_refused_with_a_clear_message() -> None:
    config = StackConfig(d_model=16, n_heads=2, n_layers=2, seed=0)
    trace = trace_text("The cat sat on the mat.", config, text_pair="It was very tired.")
    with pytest.raises(ValueError, match="second sentence"):
        rollout(trace)


def test_importable_from_the_package() -> None:
    assert attnviz.rollout is rollout and "rollout" in attnviz.__all__
