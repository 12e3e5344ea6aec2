"""A pretrained model's real K/V grouping (MHA, MQA or GQA), measured on its own trace."""

from __future__ import annotations

from attnviz.engine.attention import expand_kv, masked_softmax
from attnviz.engine.trace import LayerTrace


def mode(n_heads: int, n_kv_heads: int) -> str:
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}")
    return "MHA" if n_kv_heads == n_heads else ("MQA" if n_kv_heads == 1 else "GQA")


def expanded_error(layer: LayerTrace) -> float:
    """Largest |weights - softmax(q·expand(k)·scale, masked)| of one traced layer: how exactly the
    unexpanded K, shared by each group of query heads, reproduces the model's weights."""
    k_full = expand_kv(layer.k, layer.n_heads)  # [head, k, d_head]
    logits = (layer.q @ k_full.transpose(-1, -2)) * layer.scale  # [head, q, k]
    weights = masked_softmax(logits, layer.mask, inplace=True)  # [head, q, k]
    return float((weights - layer.weights).abs().max())
