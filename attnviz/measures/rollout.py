"""Attention rollout (Abnar & Zuidema 2020): how attention composes across layers.

Each layer mixes the previous layer's token vectors with its head-mean weights W̄; the residual
connection adds each token's own vector back. Rollout models a layer as Ã = 0.5·W̄ + 0.5·I, row-
normalised, and multiplies the layers: row i of R_L = Ã_L ··· Ã_0 says how much each input token
feeds token i after layer L.
"""

from __future__ import annotations

import torch

from attnviz.engine.trace import Trace


def rollout(trace: Trace, residual: bool = True) -> torch.Tensor:
    """Rolled-out attention after every layer. [layer, q, k]; layer L holds Ã_L @ ... @ Ã_0.

    residual=False multiplies the plain head-mean weights W̄ (no identity, no renormalisation).
    Cross-attention does not compose (each layer's keys are the other sentence, not the previous
    layer's outputs) and is refused with a ValueError, as is a trace without layers.
    """
    if not trace.layers:
        raise ValueError("rollout needs a trace with at least one layer")
    if trace.is_cross:
        raise ValueError(
            "rollout composes self-attention only: this trace's keys come from a second sentence "
            f"({len(trace.key_tokens)} key tokens for {len(trace.tokens)} query tokens), so one "
            "layer's weights cannot be multiplied by the next's"
        )
    rolled = []
    acc = None
    for index, lt in enumerate(trace.layers):
        n_q, n_k = lt.weights.shape[-2:]
        if n_q != n_k:
            raise ValueError(
                f"layer {index} has {n_q} queries and {n_k} keys: rollout needs square weights"
            )
        a = lt.weights.double().mean(0)  # [q, k] head mean W̄
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(n_q, dtype=a.dtype)  # [q, k]
            a = a / a.sum(-1, keepdim=True)  # [q, k] rows sum to 1 (each is >= 0.5)
        acc = a if acc is None else a @ acc  # [q, k]
        rolled.append(acc)
    return torch.stack(rolled).float()  # [layer, q, k]
