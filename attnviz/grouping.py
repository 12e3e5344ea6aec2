"""A pretrained model's real K/V grouping (MHA, MQA or GQA), measured on its own trace."""

from __future__ import annotations

import torch

from attnviz.attention import expand_kv
from attnviz.trace import LayerTrace


def mode(n_heads: int, n_kv_heads: int) -> str:
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}")
    return "MHA" if n_kv_heads == n_heads else ("MQA" if n_kv_heads == 1 else "GQA")


def expanded_error(layer: LayerTrace) -> float:
    """Largest |weights - softmax(q·expand(k)·scale, masked)| of one traced layer: how exactly the
    unexpanded K, shared by each group of query heads, reproduces the model's weights."""
    k_full = expand_kv(layer.k, layer.n_heads)  # [head, k, d_head]
    logits = (layer.q @ k_full.transpose(-1, -2)) * layer.scale  # [head, q, k]
    if layer.mask is not None:
        logits = logits.masked_fill(~layer.mask, float("-inf"))
    live = torch.isfinite(logits).any(-1, keepdim=True)  # [head, q, 1] rows with a key left
    weights = torch.softmax(logits.masked_fill(~live, 0.0), -1) * live  # [head, q, k]
    return float((weights - layer.weights).abs().max())


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, d_head: int, n_tokens: int, bytes_per: int = 4
) -> int:
    """Keys and values of every layer kept for n_tokens tokens (what generation caches)."""
    return 2 * n_layers * n_kv_heads * d_head * n_tokens * bytes_per
