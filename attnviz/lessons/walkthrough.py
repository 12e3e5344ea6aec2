"""The four steps of scaled dot-product attention on a tiny example, every matrix kept.

Row-vector convention (as most code): X is [n, d_model], Q = X W_q, scores = Q Kᵀ.
Note 001 writes column vectors instead: A = KᵀQ with tokens as columns; `column_form` shows the two
give the same weights once softmax runs over keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnviz.engine import validate
from attnviz.engine.config import StackConfig
from attnviz.engine.stack import build_weights, inputs
from attnviz.engine.tokenize import tokenize

STEPS = ("scores", "scaled", "weights", "z")


@dataclass(frozen=True)
class Walkthrough:
    tokens: list[str]
    x: torch.Tensor  # [n, d_model] embeddings + positional encoding
    w_q: torch.Tensor  # [d_model, d_k]
    w_k: torch.Tensor  # [d_model, d_k]
    w_v: torch.Tensor  # [d_model, d_k]
    q: torch.Tensor  # [n, d_k]
    k: torch.Tensor  # [n, d_k]
    v: torch.Tensor  # [n, d_k]
    scores: torch.Tensor  # [n, n] Q Kᵀ
    scale: float  # (1/sqrt(d_k) or 1) / temperature
    scaled: torch.Tensor  # [n, n] scores * scale, -inf where masked
    weights: torch.Tensor  # [n, n] row-wise softmax
    z: torch.Tensor  # [n, d_k] weights @ V
    causal: bool
    n_input_tokens: int  # before keeping the first max_tokens
    use_scale: bool = True  # whether scale includes 1/sqrt(d_k)
    temperature: float = 1.0  # scale is further divided by this

    @property
    def d_k(self) -> int:
        return self.q.shape[-1]


def walkthrough(
    text: str = "我爱水课",
    d_k: int = 4,
    seed: int = 0,
    use_scale: bool = True,
    causal: bool = False,
    max_tokens: int = 12,
    temperature: float = 1.0,
) -> Walkthrough:
    """One head with d_model = d_k on the first `max_tokens` tokens of `text`."""
    text = validate.text("text", text)
    d_k, max_tokens = (
        validate.whole("d_k", d_k, 1, 64),
        validate.whole("max_tokens", max_tokens, 1, 64),
    )
    all_tokens = tokenize(text)
    tokens = all_tokens[:max_tokens]
    config = StackConfig(
        d_model=d_k,
        n_heads=1,
        use_scale=use_scale,
        temperature=temperature,
        causal=causal,
        seed=seed,
    )
    w = build_weights(config)[0]
    x = inputs(tokens, config)  # [n, d_model]
    q, k, v = x @ w.w_q, x @ w.w_k, x @ w.w_v  # [n, d_k] each
    scores = q @ k.T  # [n, n]
    scaled = scores * config.scale  # [n, n]
    if causal:
        allowed = torch.ones_like(scores, dtype=torch.bool).tril()  # [n, n]
        scaled = scaled.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scaled, dim=-1)  # [n, n]
    return Walkthrough(
        tokens=tokens,
        x=x,
        w_q=w.w_q,
        w_k=w.w_k,
        w_v=w.w_v,
        q=q,
        k=k,
        v=v,
        scores=scores,
        scale=config.scale,
        scaled=scaled,
        weights=weights,
        z=weights @ v,  # [n, d_k]
        causal=causal,
        n_input_tokens=len(all_tokens),
        use_scale=use_scale,
        temperature=temperature,
    )


def column_form(wt: Walkthrough) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Note 001's convention: tokens as columns. Returns A = KᵀQ [n_k, n_q], its softmax over
    keys (down each column) and the largest difference from the row form's weights, transposed."""
    q_cols, k_cols = wt.q.T, wt.k.T  # [d_k, n]: one column per token
    a = k_cols.T @ q_cols  # [n_k, n_q]: a[i, j] = k^i · q^j
    a_scaled = a * wt.scale
    if wt.causal:
        allowed = torch.ones_like(a, dtype=torch.bool).triu()  # key i <= query j
        a_scaled = a_scaled.masked_fill(~allowed, float("-inf"))
    a_soft = torch.softmax(a_scaled, dim=0)  # [n_k, n_q] softmax over keys, i.e. per column
    return a, a_soft, float((a_soft.T - wt.weights).abs().max())
