"""The masks lesson (note 002, with notes 001 and 004 where they touch it), as plain tensors.

A decoder's causal mask, a padding mask over a batch of two sentences, what note 002's "1e-10"
does compared with -inf (and note 004's -1e9), a row with every key masked, and cross-attention
with queries from one sentence and keys/values from another. The toy stack computes everything
here; `naive_softmax` is the notes' way (masked_fill, then softmax) kept only to show its traps.
No streamlit here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnviz.engine.attention import attend
from attnviz.engine.config import StackConfig
from attnviz.engine.stack import PAD, trace_text
from attnviz.engine.trace import LayerTrace

MAX_TOKENS = 8  # every number stays readable, three matrices abreast at 1280 px
# What goes into the masked cells: the right value, note 004's finite stand-in, note 002's typo.
FILLS = {"-inf": -math.inf, "-1e9": -1e9, "1e-10": 1e-10}


def _config(d_k: int, seed: int, causal: bool = False) -> StackConfig:
    return StackConfig(d_model=d_k, n_heads=1, causal=causal, seed=seed, max_tokens=MAX_TOKENS)


def causal_mask(n: int) -> torch.Tensor:
    """True = may attend: query i sees keys 0..i. bool [n, n]"""
    if n < 1:
        raise ValueError(f"n={n} must be at least 1")
    return torch.ones(n, n, dtype=torch.bool).tril()


def additive(mask: torch.Tensor) -> torch.Tensor:
    """The mask as the M that is added to the logits: 0 where allowed, -inf where not."""
    return torch.zeros(mask.shape).masked_fill(~mask.to(torch.bool), -math.inf)


def naive_softmax(logits: torch.Tensor, mask: torch.Tensor, fill: float) -> torch.Tensor:
    """softmax(logits.masked_fill(~mask, fill)) over the last axis, as the notes write it.

    With fill = -inf a row with no allowed key is NaN (its max is -inf, and -inf - -inf is NaN);
    with -1e9 that row is uniform; with 1e-10 nothing is masked at all.
    """
    return torch.softmax(logits.masked_fill(~mask.to(torch.bool), fill), dim=-1)


def weight_on_masked(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per query row, the total weight that landed on keys it may not see. [..., q]"""
    return (weights * (~mask.to(torch.bool))).sum(-1)


@dataclass(frozen=True)
class CausalLesson:
    """One decoder head on one sentence: logits before the mask, M, and the weights per fill."""

    tokens: list[str]
    logits: torch.Tensor  # [q, k] scores * scale, before the mask
    mask: torch.Tensor  # bool [q, k], True = may attend
    masked_logits: torch.Tensor  # [q, k] logits + M (-inf in the future)
    weights: dict[str, torch.Tensor]  # fill name -> [q, k]; "-inf" equals the stack's weights
    leak: dict[str, float]  # fill name -> largest weight a row puts on future tokens
    stack_weights: torch.Tensor  # [q, k] what attnviz's own attention computed
    n_input_tokens: int

    def __post_init__(self) -> None:
        if set(self.weights) != set(FILLS):
            raise ValueError(f"weights must have one entry per fill: {sorted(FILLS)}")


def causal_lesson(text: str, d_k: int = 8, seed: int = 0) -> CausalLesson:
    """A causal self-attention head on `text` (first MAX_TOKENS tokens)."""
    trace = trace_text(text, _config(d_k, seed, causal=True))
    lt = trace.layers[0]
    logits = lt.scores[0] * lt.scale  # [q, k]
    mask = lt.mask  # [q, k]
    weights = {name: naive_softmax(logits, mask, fill) for name, fill in FILLS.items()}
    leak = {name: float(weight_on_masked(w, mask).max()) for name, w in weights.items()}
    return CausalLesson(
        tokens=trace.tokens,
        logits=logits,
        mask=mask,
        masked_logits=logits + additive(mask),
        weights=weights,
        leak=leak,
        stack_weights=lt.weights[0],
        n_input_tokens=trace.n_input_tokens,
    )


@dataclass(frozen=True)
class PaddingLesson:
    """Two sentences in one batch: the shorter one padded with [PAD], padded keys masked."""

    tokens: list[list[str]]  # [batch][n], [PAD] appended to the shorter
    key_mask: torch.Tensor  # bool [batch, n], False on [PAD]
    weights: torch.Tensor  # [batch, q, k] one head
    unpadded_gap: float  # largest |weight| change padding causes on the real tokens (0 is right)
    pad_weight: float  # largest weight any query puts on a [PAD] key (0 is right)


def padding_lesson(text_a: str, text_b: str, d_k: int = 8, seed: int = 0) -> PaddingLesson:
    config = _config(d_k, seed)
    alone = [trace_text(text, config) for text in (text_a, text_b)]
    n = max(len(t.tokens) for t in alone)
    padded = [trace_text(text, config, pad_to=n) for text in (text_a, text_b)]
    key_mask = torch.stack(
        [torch.tensor([tok != PAD for tok in t.tokens]) for t in padded]
    )  # [batch, n]
    weights = torch.stack([t.layers[0].weights[0] for t in padded])  # [batch, q, k]
    gap = 0.0
    for a, p in zip(alone, padded, strict=True):
        m = len(a.tokens)
        real = p.layers[0].weights[0, :m, :m]  # [m, m] real queries on real keys
        gap = max(gap, float((real - a.layers[0].weights[0]).abs().max()))
    return PaddingLesson(
        tokens=[t.tokens for t in padded],
        key_mask=key_mask,
        weights=weights,
        unpadded_gap=gap,
        pad_weight=float(weight_on_masked(weights, key_mask.unsqueeze(1)).max()),
    )


@dataclass(frozen=True)
class EmptyRow:
    """One query row whose every key is masked, through the naive fills and through attnviz."""

    logits: torch.Tensor  # [k] the row's logits before masking
    naive: dict[str, torch.Tensor]  # fill name -> [k] softmax(masked_fill(...))
    attnviz: torch.Tensor  # [k] attnviz.engine.attention.attend's weights: zeros


def empty_row(logits: torch.Tensor) -> EmptyRow:
    """Mask every key of one row of logits [k] and softmax it every way."""
    row = logits.reshape(1, -1)  # [1, k]
    none = torch.zeros_like(row, dtype=torch.bool)  # [1, k] nothing may be attended
    naive = {name: naive_softmax(row, none, fill)[0] for name, fill in FILLS.items()}
    # attend() multiplies q·kᵀ by scale: a one-dimensional q of 1 and k = logits give the row back.
    q = torch.ones(1, 1, 1)  # [head, q, d]
    k = row.reshape(1, -1, 1)  # [head, k, d]
    got = attend(q, k, torch.zeros_like(k), mask=none, scale=1.0)
    return EmptyRow(logits=row[0], naive=naive, attnviz=got.weights[0, 0])


@dataclass(frozen=True)
class CrossLesson:
    """Queries from one sentence, keys and values from another (a decoder reading the encoder)."""

    q_tokens: list[str]
    kv_tokens: list[str]
    layer: (
        LayerTrace  # q [1, n_q, d_k]; k, v [1, n_kv, d_k]; weights [1, n_q, n_kv]; z [1, n_q, d_k]
    )
    sdpa_gap: float  # largest difference from torch's scaled_dot_product_attention

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        lt = self.layer
        return {
            "Q": tuple(lt.q.shape[1:]),
            "K": tuple(lt.k.shape[1:]),
            "V": tuple(lt.v.shape[1:]),
            "QKᵀ": tuple(lt.scores.shape[1:]),
            "Z": tuple(lt.z.shape[1:]),
        }


def cross_lesson(text_q: str, text_kv: str, d_k: int = 8, seed: int = 0) -> CrossLesson:
    if not text_kv or not text_kv.strip():
        raise ValueError("cross-attention needs a second sentence for the keys and values")
    trace = trace_text(text_q, _config(d_k, seed), text_pair=text_kv)
    lt = trace.layers[0]
    oracle = torch.nn.functional.scaled_dot_product_attention(
        lt.q, lt.k, lt.v, scale=lt.scale
    )  # [1, n_q, d_k]
    return CrossLesson(
        q_tokens=trace.tokens,
        kv_tokens=trace.key_tokens,
        layer=lt,
        sdpa_gap=float((oracle - lt.z).abs().max()),
    )
