"""Classroom numbers for the seed notes: why divide by sqrt(d_k) (004), attention as convolution
(003), LayerNorm vs BatchNorm (002). Pure functions returning plain rows and CPU tensors.

Vocabulary as elsewhere: scores are raw q·k, logits the scores times the scale, weights the softmax.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

VARIANCE_D_KS = tuple(2**i for i in range(11))  # 1, 2, 4, ..., 1024
SATURATION_D_KS = (1, 4, 16, 64, 256, 1024)
KERNEL_3X3 = tuple((a, b) for a in (-1, 0, 1) for b in (-1, 0, 1))  # Δ of each head, row-major


MAX_ELEMENTS = 2**26  # the most numbers one lesson call may draw (256 MiB of float32)


def _whole(name: str, value: object, least: int = 1, most: int = MAX_ELEMENTS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name}={value!r} must be a whole number of at least {least}")
    if value > most:
        raise ValueError(f"{name}={value} is too large for a lesson: keep it <= {most}")
    return value


def _elements(what: str, n: int) -> None:
    if n > MAX_ELEMENTS:
        raise ValueError(f"{what} would draw {n:,} numbers; keep it <= {MAX_ELEMENTS:,}")


def _alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0:
        raise ValueError(f"alpha={alpha!r} must be a number >= 0 (0: uniform weights)")
    if not math.isfinite(alpha) or alpha > 1e4:
        raise ValueError(f"alpha={alpha!r} must be a finite number <= 10000")
    return float(alpha)


def _generator(seed: int, d_k: int) -> torch.Generator:
    # One stream per d_k, so a d_k's numbers do not depend on which others are swept with it.
    # Draws and dot products are float32 (several times faster on CPU), the rest float64.
    return torch.Generator().manual_seed(seed * 1_000_003 + d_k)


def variance_sweep(
    d_ks: Sequence[int] = VARIANCE_D_KS, n_samples: int = 3000, seed: int = 0
) -> list[dict[str, float]]:
    """Var(q·k) measured on random q, k with unit-variance entries, per d_k (theory: d_k), and of
    the logits q·k / sqrt(d_k) (theory: 1). One row per d_k."""
    _whole("n_samples", n_samples, least=2)
    rows = []
    for d_k in d_ks:
        _whole("d_k", d_k)
        _elements(f"variance_sweep at d_k={d_k}", 2 * n_samples * d_k)
        g = _generator(seed, d_k)
        q = torch.randn(n_samples, d_k, generator=g)  # [sample, d_k]
        k = torch.randn(n_samples, d_k, generator=g)  # [sample, d_k]
        scores = (q * k).sum(-1).double()  # [sample]
        rows.append(
            {
                "d_k": d_k,
                "var_scores": float(scores.var()),
                "var_logits": float((scores / math.sqrt(d_k)).var()),
                "theory_scores": float(d_k),
                "theory_logits": 1.0,
            }
        )
    return rows


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """d softmax / d logits = diag(p) − p pᵀ for weights p [..., n]; returns [..., n, n]."""
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # [..., n, n]


def saturation_sweep(
    d_ks: Sequence[int] = SATURATION_D_KS,
    n_keys: int = 16,
    n_samples: int = 256,
    seed: int = 0,
) -> list[dict[str, float]]:
    """How one query's weights over n_keys random keys saturate as d_k grows, with and without the
    1/sqrt(d_k) scale: mean max weight, mean entropy (nats), and the mean Frobenius norm of the
    softmax Jacobian, the factor every gradient into the logits passes through. One row per
    (d_k, scaled)."""
    _whole("n_keys", n_keys, least=2)
    _whole("n_samples", n_samples)
    rows = []
    for d_k in d_ks:
        _whole("d_k", d_k)
        _elements(f"saturation_sweep at d_k={d_k}", n_samples * (n_keys + 1) * d_k)
        _elements("the softmax Jacobians", n_samples * n_keys * n_keys)
        g = _generator(seed, d_k)
        q = torch.randn(n_samples, d_k, 1, generator=g)  # [sample, d_k, 1]
        k = torch.randn(n_samples, n_keys, d_k, generator=g)  # [sample, key, d_k]
        scores = torch.bmm(k, q).squeeze(-1).double()  # [sample, key]
        for scaled in (False, True):
            logits = scores / math.sqrt(d_k) if scaled else scores  # [sample, key]
            weights = torch.softmax(logits, dim=-1)  # [sample, key]
            jac = softmax_jacobian(weights)  # [sample, key, key]
            rows.append(
                {
                    "d_k": d_k,
                    "scaled": scaled,
                    "max_weight": float(weights.amax(-1).mean()),
                    "entropy": float(-torch.special.xlogy(weights, weights).sum(-1).mean()),
                    "jacobian_norm": float(torch.linalg.matrix_norm(jac).mean()),
                }
            )
    return rows


@dataclass(frozen=True)
class PositionScores:
    """Note 003's quadratic relative-position attention for one query (Cordonnier et al. 2020).

    δ = key position − query position; score = v·r = −α‖δ − Δ‖² + α‖Δ‖², so the weights peak at
    δ = Δ (key = query + Δ) and α sets how narrow. Note 003 writes δ = q − k, which only flips Δ.
    """

    offsets: torch.Tensor  # [key] in 1-D, [row, col, 2] in 2-D: δ per key
    v: torch.Tensor  # [2] = −α[1, −2Δ] in 1-D, [3] = −α[1, −2Δ₁, −2Δ₂] in 2-D
    r: torch.Tensor  # [key, 2] = [δ², δ] in 1-D, [row, col, 3] = [‖δ‖², δ₁, δ₂] in 2-D
    scores: torch.Tensor  # [key] or [row, col]: v·r
    weights: torch.Tensor  # [key] or [row, col]: softmax over every key


def _position_encoding(offsets: torch.Tensor, delta: Sequence[float], alpha: float):
    """v and r for offsets [..., dims] and Δ [dims]: r = [‖δ‖², δ...], v = −α[1, −2Δ...]."""
    d = torch.as_tensor(delta, dtype=torch.float64)  # [dims]
    r = torch.cat([offsets.pow(2).sum(-1, keepdim=True), offsets], dim=-1)  # [..., 1 + dims]
    v = -alpha * torch.cat([torch.ones(1, dtype=torch.float64), -2 * d])  # [1 + dims]
    return v, r


def quadratic_position_scores(
    n: int, delta: float, alpha: float, query: int | None = None
) -> PositionScores:
    """One query (default: the middle) over a sequence of n positions; see PositionScores."""
    _whole("n", n, most=2**16)
    alpha = _alpha(alpha)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta):
        raise ValueError(f"delta={delta!r} must be a finite number")
    query = n // 2 if query is None else query
    if not isinstance(query, int) or not 0 <= query < n:
        raise ValueError(f"query={query!r} must be a position in 0..{n - 1}")
    offsets = torch.arange(n, dtype=torch.float64) - query  # [key]
    v, r = _position_encoding(offsets.unsqueeze(-1), [float(delta)], alpha)  # [2], [key, 2]
    scores = r @ v  # [key]
    return PositionScores(offsets, v, r, scores, torch.softmax(scores, dim=-1))


def _grid_offsets(grid_h: int, grid_w: int, query_pos: tuple[int, int]) -> torch.Tensor:
    _whole("grid_h", grid_h, most=2**10)
    _whole("grid_w", grid_w, most=2**10)
    qr, qc = query_pos
    if not (0 <= qr < grid_h and 0 <= qc < grid_w):
        raise ValueError(f"query_pos={query_pos} must lie in the {grid_h}x{grid_w} grid")
    rows = torch.arange(grid_h, dtype=torch.float64) - qr  # [row]
    cols = torch.arange(grid_w, dtype=torch.float64) - qc  # [col]
    return torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1)  # [row, col, 2]


def quadratic_position_scores_2d(
    grid_h: int,
    grid_w: int,
    query_pos: tuple[int, int],
    delta: tuple[float, float] = (0.0, 0.0),
    alpha: float = 1.0,
) -> PositionScores:
    """One query pixel over every pixel of a grid_h × grid_w image: score = −α‖δ − Δ‖² + α‖Δ‖².
    Note 003 drops the Δ terms and gets α‖δ‖² (peaked nowhere); keeping them peaks at query + Δ."""
    alpha = _alpha(alpha)
    offsets = _grid_offsets(grid_h, grid_w, query_pos)  # [row, col, 2]
    v, r = _position_encoding(offsets, delta, alpha)  # [3], [row, col, 3]
    scores = r @ v  # [row, col]
    weights = torch.softmax(scores.flatten(), dim=-1).view(grid_h, grid_w)  # [row, col]
    return PositionScores(offsets, v, r, scores, weights)


def kernel_from_heads(
    grid: tuple[int, int],
    alpha: float,
    deltas: Sequence[tuple[int, int]] = KERNEL_3X3,
    query_pos: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Each head's weight map [head, row, col] around one query pixel (default: the centre), head
    i using Δ = deltas[i]. At large α head i puts all its weight on query + Δᵢ: 9 heads read the
    9 pixels of a 3×3 window, and W_O mixing them is a 3×3 convolution (see heads_as_conv)."""
    grid_h, grid_w = grid
    query_pos = (grid_h // 2, grid_w // 2) if query_pos is None else query_pos
    maps = [
        quadratic_position_scores_2d(grid_h, grid_w, query_pos, d, alpha).weights for d in deltas
    ]
    return torch.stack(maps)  # [head, row, col]


def heads_as_conv(
    image: torch.Tensor,
    kernel: torch.Tensor,
    alpha: float,
    deltas: Sequence[tuple[int, int]] = KERNEL_3X3,
) -> torch.Tensor:
    """Attention with one head per kernel tap: every pixel queries every pixel, head i with
    Δᵢ = deltas[i] (offsets from the kernel's centre), values = pixel intensities, W_O = the
    kernel taps. At large α this is conv2d(image, kernel) (cross-correlation, as torch) away from
    the border; there a head whose query + Δ is off the grid spreads over the nearest pixels."""
    if image.dim() != 2:
        raise ValueError(f"image has shape {tuple(image.shape)}: pass one channel [row, col]")
    kh, kw = kernel.shape
    if kh * kw != len(deltas):
        raise ValueError(f"kernel {kh}x{kw} needs {kh * kw} deltas, got {len(deltas)}")
    alpha = _alpha(alpha)
    h, w = image.shape
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")  # [row, col]
    pos = torch.stack([rows, cols], dim=-1).view(h * w, 2).double()  # [pixel, 2]
    offsets = pos.unsqueeze(0) - pos.unsqueeze(1)  # [query, key, 2]: key − query
    values = image.double().flatten()  # [key]
    out = torch.zeros(h * w, dtype=torch.float64)  # [query]
    for tap, d in zip(kernel.double().flatten(), deltas, strict=True):
        v, r = _position_encoding(offsets, d, alpha)  # [3], [query, key, 3]
        weights = torch.softmax(r @ v, dim=-1)  # [query, key]
        out += tap * (weights @ values)  # [query]: z of this head, times its W_O entry
    return out.view(h, w)  # [row, col]


@dataclass(frozen=True)
class NormCompare:
    """LayerNorm and BatchNorm (no learned gain or bias) of one [batch, seq, d_model] tensor."""

    layer_norm: torch.Tensor  # [batch, seq, d_model]: each token over its own d_model features
    batch_norm: torch.Tensor  # [batch, seq, d_model]: each feature over every token of the batch
    layer_norm_axes: tuple[int, ...]  # (2,)
    batch_norm_axes: tuple[int, ...]  # (0, 1)
    layer_norm_axis_names: tuple[str, ...]  # ("d_model",)
    batch_norm_axis_names: tuple[str, ...]  # ("batch", "seq")


def _normalise(x: torch.Tensor, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=False)  # biased, as both torch layers
    return (x - mean) / torch.sqrt(var + eps)


def layernorm_vs_batchnorm(x: torch.Tensor, eps: float = 1e-5) -> NormCompare:
    """Normalise x [batch, seq, d_model] both ways (note 002's two headings)."""
    if x.dim() != 3:
        raise ValueError(f"x has shape {tuple(x.shape)}: pass [batch, seq, d_model]")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps={eps!r} must be a number >= 0")
    return NormCompare(
        layer_norm=_normalise(x, (2,), eps),  # [batch, seq, d_model]
        batch_norm=_normalise(x, (0, 1), eps),  # [batch, seq, d_model]
        layer_norm_axes=(2,),
        batch_norm_axes=(0, 1),
        layer_norm_axis_names=("d_model",),
        batch_norm_axis_names=("batch", "seq"),
    )
