"""Classroom numbers: the sqrt(d_k) argument (note 004), attention as convolution (note 003),
LayerNorm vs BatchNorm (note 002), against theory and torch oracles."""

import math
import time

import pytest
import torch
import torch.nn.functional as F

from attnviz.lessons.convolution import (
    KERNEL_3X3,
    heads_as_conv,
    kernel_from_heads,
    quadratic_position_scores,
    quadratic_position_scores_2d,
)
from attnviz.lessons.norms import layernorm_vs_batchnorm
from attnviz.lessons.scaling import saturation_sweep, softmax_jacobian, variance_sweep


def test_variance_of_q_dot_k_is_d_k_at_64():
    (row,) = variance_sweep(d_ks=(64,), n_samples=40_000)
    assert abs(row["var_scores"] / 64 - 1) < 0.05, row
    assert abs(row["var_logits"] - 1) < 0.05, row
    assert row["theory_scores"] == 64 and row["theory_logits"] == 1


def test_variance_sweep_follows_theory_at_every_d_k():
    rows = variance_sweep()
    assert [r["d_k"] for r in rows] == [2**i for i in range(11)]
    for r in rows:  # 3000 samples: a 2.6% standard error on a variance
        assert abs(r["var_scores"] / r["d_k"] - 1) < 0.15, r
        assert abs(r["var_logits"] - 1) < 0.15, r
    assert rows[-1]["var_scores"] > 500 * rows[0]["var_scores"]


def test_sweeps_are_seeded_and_independent_of_the_other_d_ks():
    assert variance_sweep((8, 64), seed=1) == variance_sweep((8, 64), seed=1)
    assert variance_sweep((64,), seed=1)[0] == variance_sweep((8, 64), seed=1)[1]
    assert variance_sweep((64,), seed=1) != variance_sweep((64,), seed=2)


def _by(rows, scaled):
    return {r["d_k"]: r for r in rows if r["scaled"] is scaled}


def test_unscaled_weights_saturate_scaled_do_not():
    rows = saturation_sweep()
    raw, scaled = _by(rows, False), _by(rows, True)
    d_ks = sorted(raw)
    max_raw = [raw[d]["max_weight"] for d in d_ks]
    assert max_raw == sorted(max_raw) and max_raw[-1] > 0.9, max_raw
    assert abs(scaled[1024]["max_weight"] - scaled[16]["max_weight"]) < 0.05
    assert raw[1024]["entropy"] < 0.1 * math.log(16) < 0.8 * math.log(16) < scaled[1024]["entropy"]


def test_unscaled_softmax_gradients_vanish_at_large_d_k():
    rows = saturation_sweep()
    raw, scaled = _by(rows, False), _by(rows, True)
    assert raw[1024]["jacobian_norm"] < 0.25 * raw[16]["jacobian_norm"]
    assert raw[1024]["jacobian_norm"] < 0.25 * scaled[1024]["jacobian_norm"]
    assert abs(scaled[1024]["jacobian_norm"] / scaled[16]["jacobian_norm"] - 1) < 0.1
    assert raw[1]["jacobian_norm"] == scaled[1]["jacobian_norm"]  # sqrt(1) = 1


def test_softmax_jacobian_matches_autograd():
    logits = torch.randn(2, 5, dtype=torch.float64)  # [row, key]
    p = torch.softmax(logits, -1)  # [row, key]
    for i in range(2):
        oracle = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), logits[i])
        assert torch.allclose(softmax_jacobian(p)[i], oracle)
    one_hot = softmax_jacobian(torch.tensor([0.0, 1.0, 0.0]))
    assert one_hot.abs().max() == 0  # a saturated softmax passes no gradient


@pytest.mark.parametrize("delta", [-4, 0, 3])
def test_quadratic_scores_peak_at_delta_and_equal_v_dot_r(delta):
    alpha = 0.7
    pos = quadratic_position_scores(21, delta, alpha)
    assert pos.offsets[pos.weights.argmax()] == delta
    d = pos.offsets
    r = torch.stack([d**2, d], dim=-1)  # [key, 2]: [δ², δ]
    v = -alpha * torch.tensor([1.0, -2.0 * delta], dtype=torch.float64)  # [2]
    assert torch.allclose(pos.r, r) and torch.allclose(pos.v, v)
    assert torch.allclose(pos.scores, r @ v)
    c = alpha * delta**2  # the constant of −α(δ − Δ)² + c; softmax ignores it
    assert torch.allclose(pos.scores, -alpha * (d - delta) ** 2 + c)
    assert torch.allclose(pos.weights, torch.softmax(-alpha * (d - delta) ** 2, -1))


def test_alpha_sets_the_width():
    widths = []
    for alpha in (0.02, 0.1, 0.5, 2.0):
        pos = quadratic_position_scores(41, 2.0, alpha)
        mean = (pos.weights * pos.offsets).sum()
        widths.append(float((pos.weights * (pos.offsets - mean) ** 2).sum().sqrt()))
    assert widths == sorted(widths, reverse=True) and widths[-1] < 0.5 < 3 < widths[0], widths
    uniform = torch.full((9,), 1 / 9.0, dtype=torch.float64)  # [key]
    assert torch.allclose(quadratic_position_scores(9, 1.0, 0.0).weights, uniform)


def test_quadratic_scores_query_at_the_edge():
    pos = quadratic_position_scores(10, -2, 1.0, query=0)  # δ = −2 is off the left edge
    assert pos.offsets.tolist() == list(range(10))
    assert pos.offsets[pos.weights.argmax()] == 0  # the nearest reachable key


def test_2d_peak_at_query_plus_delta():
    pos = quadratic_position_scores_2d(7, 9, query_pos=(3, 4), delta=(-1, 2), alpha=1.0)
    assert pos.weights.shape == (7, 9)
    assert divmod(int(pos.weights.argmax()), 9) == (2, 6)
    assert torch.isclose(pos.weights.sum(), torch.tensor(1.0, dtype=torch.float64))
    d = pos.offsets  # [row, col, 2]
    expected = -((d - torch.tensor([-1.0, 2.0], dtype=torch.float64)) ** 2).sum(-1) + 5.0
    assert torch.allclose(pos.scores, expected)
    # note 003's algebra gives α‖δ‖²: largest at the corner farthest from the query
    note = (d**2).sum(-1)
    assert divmod(int(note.argmax()), 9) != (2, 6)


def test_nine_heads_cover_a_3x3_window_at_large_alpha():
    maps = kernel_from_heads((7, 7), alpha=20.0)  # [head, row, col]
    assert maps.shape == (9, 7, 7)
    peaks = [divmod(int(m.argmax()), 7) for m in maps]
    assert peaks == [(3 + a, 3 + b) for a, b in KERNEL_3X3]
    assert maps.amax(dim=(1, 2)).min() > 0.99
    soft = kernel_from_heads((7, 7), alpha=0.1)
    assert soft.amax(dim=(1, 2)).max() < 0.5  # small α: each head looks wide


def test_heads_as_conv_equals_conv2d_away_from_the_border():
    g = torch.Generator().manual_seed(0)
    image = torch.randn(8, 10, generator=g, dtype=torch.float64)  # [row, col]
    kernel = torch.randn(3, 3, generator=g, dtype=torch.float64)  # [3, 3]
    conv = F.conv2d(image[None, None], kernel[None, None], padding=1)[0, 0]  # [row, col]
    sharp = heads_as_conv(image, kernel, alpha=20.0)  # [row, col]
    assert torch.allclose(sharp[1:-1, 1:-1], conv[1:-1, 1:-1], atol=1e-6)
    blurred = heads_as_conv(image, kernel, alpha=0.3)
    assert not torch.allclose(blurred[1:-1, 1:-1], conv[1:-1, 1:-1], atol=0.1)


def test_layernorm_and_batchnorm_average_different_axes():
    g = torch.Generator().manual_seed(0)
    x = 3 + 2 * torch.randn(4, 5, 8, generator=g)  # [batch, seq, d_model]
    x[..., 0] += 10  # one feature far off the others, so the two norms must differ
    out = layernorm_vs_batchnorm(x, eps=0.0)
    ln, bn = out.layer_norm, out.batch_norm
    assert out.layer_norm_axes == (2,) and out.batch_norm_axes == (0, 1)
    assert out.layer_norm_axis_names == ("d_model",)
    assert out.batch_norm_axis_names == ("batch", "seq")
    assert torch.allclose(ln.mean(-1), torch.zeros(4, 5), atol=1e-5)
    assert torch.allclose(ln.var(-1, unbiased=False), torch.ones(4, 5), atol=1e-4)
    assert torch.allclose(bn.mean((0, 1)), torch.zeros(8), atol=1e-5)
    assert torch.allclose(bn.var((0, 1), unbiased=False), torch.ones(8), atol=1e-4)
    assert not torch.allclose(ln, bn, atol=0.1)
    assert not torch.allclose(ln.mean((0, 1)), torch.zeros(8), atol=0.1)


def test_norms_match_torch():
    x = torch.randn(3, 6, 4)  # [batch, seq, d_model]
    out = layernorm_vs_batchnorm(x, eps=1e-3)
    assert torch.allclose(out.layer_norm, F.layer_norm(x, (4,), eps=1e-3), atol=1e-6)
    flat = x.reshape(18, 4)  # [batch·seq, d_model]: BatchNorm1d sees every token as a sample
    oracle = F.batch_norm(flat, None, None, training=True, eps=1e-3).view(3, 6, 4)
    assert torch.allclose(out.batch_norm, oracle, atol=1e-6)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: variance_sweep((0,)), "d_k=0 must be a whole number of at least 1"),
        (lambda: variance_sweep(n_samples=1), "n_samples=1"),
        (lambda: saturation_sweep(n_keys=1), "n_keys=1"),
        (lambda: quadratic_position_scores(0, 0, 1.0), "n=0"),
        (lambda: quadratic_position_scores(5, 0, -1.0), r"alpha=-1.0 must be a number >= 0"),
        (lambda: quadratic_position_scores(5, 0, 1.0, query=5), r"query=5 must be a position"),
        (lambda: quadratic_position_scores_2d(3, 3, (3, 0)), r"query_pos=\(3, 0\)"),
        (lambda: heads_as_conv(torch.zeros(2, 3, 3), torch.zeros(3, 3), 1.0), "one channel"),
        (lambda: heads_as_conv(torch.zeros(3, 3), torch.zeros(2, 2), 1.0), "needs 4 deltas"),
        (lambda: layernorm_vs_batchnorm(torch.zeros(3, 4)), r"shape \(3, 4\)"),
        (lambda: layernorm_vs_batchnorm(torch.zeros(1, 3, 4), eps=-1), "eps=-1"),
    ],
)
def test_bad_arguments_raise_with_the_rule(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "call",
    [variance_sweep, saturation_sweep, lambda: kernel_from_heads((15, 15), 2.0)],
    ids=["variance_sweep", "saturation_sweep", "kernel_from_heads"],
)
def test_default_calls_are_fast_enough_for_a_page(call):
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    assert best < 0.5, f"{best:.2f} s"
