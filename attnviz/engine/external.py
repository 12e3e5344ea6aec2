"""A Trace from attention weights computed elsewhere: `(attentions, tokens)` from any forward with
`output_attentions=True` (Hugging Face, TransformerLens patterns, BertViz's inputs).

Only the weights are known: q, k, v, z and the output are empty ([n_heads, n, 0]) and the raw
scores are refused on access with a message, so the views that read weights alone (overview,
heads, lines, rollout, link) draw and the others say why they cannot. The trace says so in
`meta["weights_only"]`. No streamlit, no transformers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnviz.engine.trace import LayerTrace, Trace

SOURCE = "external attentions"


def _no_scores(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    raise ValueError(
        "this trace was made from attention weights alone ((attentions, tokens)): its raw scores, "
        "q, k, v and outputs are unknown. Use a weights view (overview, heads, lines, rollout, "
        "link), or trace the model with attnviz.trace_model to see every tensor."
    )


def _as_layers(attentions: object) -> list[torch.Tensor]:
    """Each layer as a float32 CPU tensor [head, q, k] (batch index 0 if there is one)."""
    if isinstance(attentions, torch.Tensor):  # one tensor [layer, (batch,) head, q, k]
        attentions = list(attentions)
    if not isinstance(attentions, Sequence) or not attentions:
        raise ValueError(
            "attentions must be a non-empty tuple of tensors, one per layer, as a forward with "
            f"output_attentions=True returns; got {type(attentions).__name__}"
        )
    layers = []
    for i, a in enumerate(attentions):
        if a is None:
            raise ValueError(
                f"attentions[{i}] is None: the model ran with SDPA or flash attention, which "
                'return no weights. Load it with attn_implementation="eager" and pass '
                "output_attentions=True."
            )
        a = torch.as_tensor(a).detach()
        if a.dim() == 4:
            if a.shape[0] != 1:
                raise ValueError(
                    f"attentions[{i}] has a batch of {a.shape[0]}: pass one example, e.g. "
                    "tuple(a[j : j + 1] for a in attentions)"
                )
            a = a[0]
        if a.dim() != 3:
            raise ValueError(
                f"attentions[{i}] has shape {tuple(a.shape)}: expected [batch, head, q, k] or "
                "[head, q, k]"
            )
        layers.append(a.to("cpu", torch.float32))
    return layers


def trace_from_attentions(
    attentions: object,
    tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    source: str = SOURCE,
) -> Trace:
    """A weights-only Trace from per-layer attention weights ([batch=1, head, q, k] or
    [head, q, k] each) and the tokens of the queries (and of the keys, for cross-attention).
    Checks the shapes against the tokens, that no weight is NaN or negative and that each row
    sums to 1 (or to 0 for a fully masked padding row)."""
    layers = _as_layers(attentions)
    tokens = [str(t) for t in tokens]
    keys = tokens if key_tokens is None else [str(t) for t in key_tokens]
    n_heads = layers[0].shape[0]
    traced = []
    for i, w in enumerate(layers):  # w: [head, q, k]
        if w.shape != (n_heads, len(tokens), len(keys)):
            raise ValueError(
                f"attentions[{i}] has shape {tuple(w.shape)} but the tokens make "
                f"[{n_heads}, {len(tokens)}, {len(keys)}]: pass the tokens of this input"
            )
        if torch.isnan(w).any() or (w < 0).any():
            raise ValueError(f"attentions[{i}] holds NaN or negative weights: pass softmax weights")
        sums = w.sum(-1)  # [head, q]
        rows_ok = ((sums - 1).abs() < 1e-3) | (sums.abs() < 1e-6)  # padding rows may be all 0
        if not rows_ok.all():
            raise ValueError(
                f"attentions[{i}]'s rows do not sum to 1 (max error {(sums - 1).abs().max():.3g}): "
                "pass the weights after the softmax, not the scores"
            )
        empty_q = torch.zeros(n_heads, len(tokens), 0)  # [head, q, 0]: unknown
        empty_k = torch.zeros(n_heads, len(keys), 0)  # [head, k, 0]
        traced.append(
            LayerTrace(
                q=empty_q,
                k=empty_k,
                v=empty_k,
                scores=_no_scores,
                scale=1.0,
                mask=None,
                weights=w,
                z=empty_q,
                output=torch.zeros(len(tokens), 0),  # [q, 0]: unknown
            )
        )
    return Trace(
        tokens=tokens,
        layers=traced,
        source=source,
        key_tokens=list(keys),
        meta={"weights_only": True},
    )
