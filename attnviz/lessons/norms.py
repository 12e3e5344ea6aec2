"""LayerNorm against BatchNorm on a (batch, seq, d_model) tensor (note 002's two headings): which
axes each one normalises, on a seeded example whose features differ in mean and scale."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnviz.engine import validate
from attnviz.engine.stack import seeded_generator


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


def norm_example(batch: int = 2, seq: int = 5, d_model: int = 8, seed: int = 0) -> torch.Tensor:
    """A seeded [batch, seq, d_model] tensor whose features have different means and scales, so
    that the two normalisations visibly differ."""
    for name, value in (("batch", batch), ("seq", seq), ("d_model", d_model)):
        validate.whole(name, value, 1, 4096)
    if batch * seq * d_model > 2**22:
        raise ValueError(f"norm_example of {batch} x {seq} x {d_model} is too large: keep it small")
    g = seeded_generator("norm", seed)
    x = torch.randn(batch, seq, d_model, generator=g)  # [batch, seq, d_model]
    shift = torch.linspace(-3, 3, d_model)  # [d_model]
    scale = torch.linspace(0.5, 3, d_model)  # [d_model]
    return x * scale + shift


def compare_norms(x: torch.Tensor) -> tuple[NormCompare, dict[str, torch.Tensor]]:
    """Both normalisations and the statistics that show what each one fixed: LayerNorm makes every
    token's features mean 0 / std 1; BatchNorm makes every feature mean 0 / std 1 over the batch."""
    res = layernorm_vs_batchnorm(x)
    stats = {
        "ln_token_mean": res.layer_norm.mean(-1),  # [batch, seq]
        "ln_token_std": res.layer_norm.std(-1, unbiased=False),  # [batch, seq]
        "bn_feature_mean": res.batch_norm.mean((0, 1)),  # [d_model]
        "bn_feature_std": res.batch_norm.std((0, 1), unbiased=False),  # [d_model]
    }
    return res, stats
