"""Why divide by sqrt(d_k) (notes 000 and 004): Var(q·k) grows with d_k, and unscaled logits
saturate the softmax and shrink its gradient. Pure functions returning plain rows.

Vocabulary as elsewhere: scores are raw q·k, logits the scores times the scale, weights the softmax.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

VARIANCE_D_KS = tuple(2**i for i in range(11))  # 1, 2, 4, ..., 1024
SATURATION_D_KS = (1, 4, 16, 64, 256, 1024)


MAX_ELEMENTS = 2**26  # the most numbers one lesson call may draw (256 MiB of float32)


def whole_number(name: str, value: object, least: int = 1, most: int = MAX_ELEMENTS) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name}={value!r} must be a whole number of at least {least}")
    if value > most:
        raise ValueError(f"{name}={value} is too large for a lesson: keep it <= {most}")
    return value


def _elements(what: str, n: int) -> None:
    if n > MAX_ELEMENTS:
        raise ValueError(f"{what} would draw {n:,} numbers; keep it <= {MAX_ELEMENTS:,}")


def _generator(seed: int, d_k: int) -> torch.Generator:
    # One stream per d_k, so a d_k's numbers do not depend on which others are swept with it.
    # Draws and dot products are float32 (several times faster on CPU), the rest float64.
    return torch.Generator().manual_seed(seed * 1_000_003 + d_k)


def variance_sweep(
    d_ks: Sequence[int] = VARIANCE_D_KS, n_samples: int = 3000, seed: int = 0
) -> list[dict[str, float]]:
    """Var(q·k) measured on random q, k with unit-variance entries, per d_k (theory: d_k), and of
    the logits q·k / sqrt(d_k) (theory: 1). One row per d_k."""
    whole_number("n_samples", n_samples, least=2)
    rows = []
    for d_k in d_ks:
        whole_number("d_k", d_k)
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
    whole_number("n_keys", n_keys, least=2)
    whole_number("n_samples", n_samples)
    rows = []
    for d_k in d_ks:
        whole_number("d_k", d_k)
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
