"""Scaled dot-product attention as one small pure function that returns every intermediate."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Attended:
    """What one attention call computed; leading dims are whatever the inputs had (e.g. [head])."""

    scores: torch.Tensor  # [..., head, q, k] raw q·k, before scale and mask
    weights: torch.Tensor  # [..., head, q, k] softmax over keys; masked entries exactly 0
    z: torch.Tensor  # [..., head, q, d_head] weights @ v


def kv_group(n_heads: int, n_kv_heads: int) -> int:
    """Query heads per K/V head (1: MHA, n_heads: MQA, else GQA), as torch's enable_gqa groups
    them: query head h reads K/V head h // kv_group(n_heads, n_kv_heads)."""
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}")
    return n_heads // n_kv_heads


def kv_head(h: int, n_heads: int, n_kv_heads: int) -> int:
    """The K/V head query head h reads."""
    return h // kv_group(n_heads, n_kv_heads)


def expand_kv(kv: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Repeat key/value heads [..., kv_head, k, d] so query head h meets kv_head(h, ...)."""
    group = kv_group(n_heads, kv.shape[-3])
    if group == 1:
        return kv  # MHA: nothing to share, nothing to copy
    return kv.repeat_interleave(group, dim=-3)  # [..., head, k, d_head]


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float = 1.0,
) -> Attended:
    """softmax(q·kᵀ · scale, masked) @ v for q [..., head, q, d] and k, v [..., kv_head, k, d].

    `mask` is boolean, True = may attend, broadcastable to [..., head, q, k]. Masked logits are -inf
    (not the "1e-10" of note 002, which is a tiny positive number and masks nothing); a row with no
    allowed key gets all-zero weights instead of NaN.
    """
    n_heads = q.shape[-3]
    k_full = expand_kv(k, n_heads)  # [..., head, k, d_head]
    v_full = expand_kv(v, n_heads)  # [..., head, k, d_head]
    scores = q @ k_full.transpose(-1, -2)  # [..., head, q, k]
    weights = masked_softmax(scores * scale, mask, inplace=True)  # [..., head, q, k]
    z = weights @ v_full  # [..., head, q, d_head]
    return Attended(scores=scores, weights=weights, z=z)


def masked_softmax(
    logits: torch.Tensor, mask: torch.Tensor | None, inplace: bool = False
) -> torch.Tensor:
    """softmax over the last axis with masked logits at -inf, so masked weights are exactly 0.

    `mask` is boolean, True = may attend, broadcastable to `logits`. A row with no allowed key
    gets all-zero weights instead of softmax(-inf, ...) = NaN. `inplace`: `logits` is a buffer the
    caller no longer needs, masked in place (one n x n tensor less per head at long n).
    """
    if mask is None:
        return torch.softmax(logits, dim=-1)
    mask = mask.to(torch.bool)
    blocked = ~mask
    logits = (
        logits.masked_fill_(blocked, float("-inf"))
        if inplace
        else logits.masked_fill(blocked, float("-inf"))
    )
    empty_rows = ~mask.any(dim=-1, keepdim=True)  # [..., q, 1]
    if bool(empty_rows.any()):
        logits = logits.masked_fill_(empty_rows, 0.0)
    probs = torch.softmax(logits, dim=-1)
    # in place where no gradient is wanted; a graph (attribution patching) keeps softmax's output
    return (
        probs.masked_fill(blocked, 0.0) if probs.requires_grad else probs.masked_fill_(blocked, 0.0)
    )
