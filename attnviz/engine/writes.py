"""What a head writes, not only where it looks: value-weighted attention (Kobayashi et al. 2020).

Head h at query i adds z_i W_O^h = Σ_j alpha_ij · f_h(x_j) to the residual stream, with
f_h(x_j) = W_O^h v_j^h: what key j sends through head h (W_O^h is the head's d_head rows of the
output projection, v_j^h the value vector of its K/V group under GQA/MQA). A large weight on a key
that sends almost nothing moves almost nothing, so

    moved[h, i, j] = alpha_ij · ||W_O^h v_j^h||_2

weighs each attention weight by the size of what it carries. The per-key norms are computed once,
when the trace is made (a [head, n_k] tensor, LayerTrace.f_norm); `moved` is recomputed from the
weights on access (LayerTrace.block("moved", ...), attnviz.engine.layer), so a long (lean) trace
stores nothing n x n for it either. The output bias is
left out, as in the paper: it is added whatever the weights are. The share of each head's
movement that reaches special tokens is attnviz.measures.stats.special_share.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from attnviz.engine.attention import expand_kv


def w_o_gram(w_o: torch.Tensor, n_heads: int, device: torch.device | str) -> torch.Tensor:
    """W_h W_hᵀ for each head's rows W_h of `w_o` ([n_heads * d_head, d_model]), float32 on
    `device`: [head, d_head, d_head]."""
    w = w_o.detach().to(device, torch.float32).reshape(n_heads, w_o.shape[0] // n_heads, -1)
    return w @ w.transpose(1, 2)  # [head, d_head, d_head]


def key_norms(
    v: torch.Tensor,
    w_o: torch.Tensor,
    n_heads: int,
    silenced: Iterable[int] = (),
    gram: torch.Tensor | None = None,
) -> torch.Tensor:
    """||W_O^h v_j^h||_2 for every query head h and key j, float32 where v lives.

    v: [..., n_kv_heads, n_k, d_head] (not expanded; query head h uses K/V head
    h // (n_heads // n_kv_heads)); w_o: [n_heads * d_head, d_model], rows in the order of the
    concatenated heads (x @ w_o, as GPT-2's Conv1D stores it; an nn.Linear's weight transposed).
    `gram`: w_o_gram(w_o, ...) when the caller keeps it (a model's weights do not change between
    traces). A silenced head sends nothing: its norms are 0. Returns [..., n_heads, n_k]."""
    n_kv, d_head = v.shape[-3], v.shape[-1]
    if n_heads % n_kv or w_o.shape[0] != n_heads * d_head:
        raise ValueError(
            f"W_O has {w_o.shape[0]} input rows and v {n_kv} K/V heads of {d_head}: expected "
            f"{n_heads} x {d_head} rows and a K/V head count that divides {n_heads}"
        )
    # ||v W_h||² = v (W_h W_hᵀ) vᵀ: a d_head x d_head Gram matrix per head instead of projecting
    # every key to d_model (n·d_head² instead of n·d_head·d_model; within 3e-7 of the direct norm
    # on the bundled models, bench/writes.py --costs)
    if gram is None:
        gram = w_o_gram(w_o, n_heads, v.device)  # [head, d_head, d_head]
    vh = expand_kv(v.float(), n_heads)  # [..., head, k, d]
    norms = ((vh @ gram) * vh).sum(-1).clamp_min_(0).sqrt_()  # [..., head, n_k]
    off = sorted(set(silenced))
    if off:
        norms[..., off, :] = 0.0
    return norms


def row_shares(x: torch.Tensor) -> torch.Tensor:
    """Each row of `moved` scaled to sum to 1: the share of what reaches a query that each key
    sends (a row that moves nothing stays 0). [..., q, k]"""
    total = x.sum(-1, keepdim=True)
    return torch.where(total > 0, x / total.clamp_min(1e-30), torch.zeros((), dtype=x.dtype))
