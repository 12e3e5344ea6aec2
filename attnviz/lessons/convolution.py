"""Attention as a convolution (note 003): quadratic relative-position scores peak at a chosen
offset Δ, α sets how narrow; nine heads with the nine Δ of a 3 x 3 kernel act as that kernel on
an image. Pure functions, plain CPU tensors (Cordonnier et al. 2020)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnviz.lessons.scaling import whole_number

KERNEL_3X3 = tuple((a, b) for a in (-1, 0, 1) for b in (-1, 0, 1))  # Δ of each head, row-major


def _alpha(alpha: float) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha >= 0:
        raise ValueError(f"alpha={alpha!r} must be a number >= 0 (0: uniform weights)")
    if not math.isfinite(alpha) or alpha > 1e4:
        raise ValueError(f"alpha={alpha!r} must be a finite number <= 10000")
    return float(alpha)


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
    whole_number("n", n, most=2**16)
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
    whole_number("grid_h", grid_h, most=2**10)
    whole_number("grid_w", grid_w, most=2**10)
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
