"""Word order and normalisation on the toy stack: what attention sees without positions (note 004's
狗咬人 / 人咬狗), and LayerNorm vs BatchNorm on a (batch, seq, d_model) tensor (note 002)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from attnviz.engine import validate
from attnviz.engine.config import StackConfig, checked
from attnviz.engine.stack import _generator, run_stack
from attnviz.engine.tokenize import tokenize
from attnviz.lessons.scaling import NormCompare, layernorm_vs_batchnorm


@dataclass(frozen=True)
class OrderCheck:
    tokens_a: list[str]
    tokens_b: list[str]
    without_pe: list[float]  # per token of a: max |output(a) − output(b)| of the same token
    with_pe: list[float]


def order_blindness(text_a: str, text_b: str, config: StackConfig) -> OrderCheck:
    """Run two orderings of the same tokens with and without positional encoding and compare each
    token's final output with the same token's in the other sentence."""
    text_a, text_b = validate.text("text_a", text_a), validate.text("text_b", text_b)
    config = checked(config)
    a, b = tokenize(text_a)[: config.max_tokens], tokenize(text_b)[: config.max_tokens]
    if sorted(a) != sorted(b):
        raise ValueError(
            f"the two texts must hold the same tokens in another order: {' '.join(a)} / "
            f"{' '.join(b)}"
        )
    position_in_b = {}
    for j, tok in enumerate(b):
        position_in_b.setdefault(tok, []).append(j)
    match = [position_in_b[tok].pop(0) for tok in a]  # token i of a is token match[i] of b
    gaps = {}
    for positional in ("none", "sinusoidal"):
        cfg = replace(config, positional=positional)
        out_a = run_stack(a, cfg).hidden  # [n, d_model]
        out_b = run_stack(b, cfg).hidden  # [n, d_model]
        gaps[positional] = (out_a - out_b[match]).abs().amax(-1).tolist()  # [n]
    return OrderCheck(a, b, gaps["none"], gaps["sinusoidal"])


def norm_example(batch: int = 2, seq: int = 5, d_model: int = 8, seed: int = 0) -> torch.Tensor:
    """A seeded [batch, seq, d_model] tensor whose features have different means and scales, so
    that the two normalisations visibly differ."""
    for name, value in (("batch", batch), ("seq", seq), ("d_model", d_model)):
        validate.whole(name, value, 1, 4096)
    if batch * seq * d_model > 2**22:
        raise ValueError(f"norm_example of {batch} x {seq} x {d_model} is too large: keep it small")
    g = _generator("norm", seed)
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
