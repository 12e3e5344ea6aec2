"""Attention between words (or whole characters) instead of pieces: `grouped(trace, by)`.

For groups of query pieces I and key pieces J (measures/pieces.py says which pieces make a word):

    w'[I, J] = mean over i in I of  sum over j in J of  w[i, j]

the attention a word pays to another word, averaged over the word's own pieces. Every row of w'
still sums to 1 (a mean of rows that sum to 1), except a padding row, which stays 0. `moved` is
grouped by the same rule (its rows sum to the mean of its pieces' sums). The mask: group I may
attend group J when any piece of I may attend any piece of J. Scores, q, k, v and z do not group:
a grouped layer holds weights, moved and the mask ([head, words, 0] stand-ins for the rest, as a
trace from weights alone does).

A short trace is grouped at once (R w C with indicator matrices, every head). A long (lean) trace
stays lean: a grouped block is made from the pieces' block, a band of rows at a time, so nothing
n x n is held for all heads; `GroupedLayer.pooled` gives the overview's pooled maps that way.
"""

from __future__ import annotations

import torch

from attnviz.engine.trace import LayerTrace, Trace
from attnviz.measures.grouped_layer import (
    GroupedLayer,
    grouped_mask,
    grouped_moved,
    grouped_weights,
    no_moved,
    no_scores,
)
from attnviz.measures.pieces import Groups, groups_of, reduce


def group_layer(layer: LayerTrace, rows: Groups, cols: Groups) -> GroupedLayer:
    """One layer over groups of its pieces (see the module's docstring for the rule)."""
    h, n_q, n_k = layer.n_heads, len(rows), len(cols)
    stand_in = dict(
        q=torch.zeros(h, n_q, 0),  # [head, q, 0]: does not group
        k=torch.zeros(h, n_k, 0),  # [head, k, 0]
        v=torch.zeros(h, n_k, 0),
        z=torch.zeros(h, n_q, 0),
        output=torch.zeros(n_q, 0),
        scores=no_scores,
        scale=layer.scale,
        row_groups=rows,
        col_groups=cols,
    )
    has_moved = layer.has("moved")
    if not layer.holds_maps:  # grouped on access, a band of rows at a time
        return GroupedLayer(
            weights=grouped_weights,
            moved=grouped_moved if has_moved else no_moved,
            mask=grouped_mask,
            base=layer,
            **stand_in,
        )
    every_row, every_col = torch.arange(n_q), torch.arange(n_k)

    def group(x: torch.Tensor) -> torch.Tensor:
        return reduce(x, rows, every_row, cols, every_col)  # [..., q', k']

    return GroupedLayer(
        weights=group(layer.weights),  # [head, q', k']
        moved=group(layer.moved) if has_moved else no_moved,  # [head, q', k']
        mask=None if layer.mask is None else group(layer.mask) > 0,  # [q', k']
        **stand_in,
    )


def _mean_rows(x: torch.Tensor, rows: Groups) -> torch.Tensor:
    """Each group's mean of the rows of x [pieces, d] (a trace's hidden states). [groups, d]"""
    every = torch.arange(len(rows))
    out = torch.zeros(len(rows), x.shape[-1]).index_add_(0, rows.local(every), x.float())
    return out / rows.sizes(every).unsqueeze(-1).float()


def _specials(trace: Trace, n_k: int) -> set[int]:
    return {p for ps in trace.special.values() for p in ps if p < n_k}


def _group_one(trace: Trace, by: str, keys: Groups | None = None) -> Trace:
    # a cross-attention trace's special positions are its keys' (the encoder's)
    cross = trace.is_cross
    rows = groups_of(trace.tokens, by, () if cross else _specials(trace, len(trace.tokens)),
                     trace.source)  # fmt: skip
    if keys is None:
        keys = groups_of(trace.key_tokens, by, _specials(trace, len(trace.key_tokens)),
                         trace.source) if cross else rows  # fmt: skip
    which = (keys if cross else rows).of_piece()  # [n] each piece's group
    special = {
        name: sorted({int(which[p]) for p in ps if p < len(which)})
        for name, ps in trace.special.items()
    }
    return Trace(
        tokens=list(rows.labels),
        layers=[group_layer(layer, rows, keys) for layer in trace.layers],
        source=trace.source,
        key_tokens=list(keys.labels),
        truncated=trace.truncated,
        n_input_tokens=trace.n_input_tokens,
        token_types=None
        if trace.token_types is None
        else [trace.token_types[s] for s, _ in rows.spans],  # fmt: skip
        special=special,
        hidden=None if trace.hidden is None else _mean_rows(trace.hidden, rows),  # [q', d_model]
        embedding=trace.embedding,
        meta={**trace.meta, "grouped": by, "spans": list(rows.spans), "pieces": trace.tokens},
        next_logits=trace.next_logits,
    )


def grouped(trace: Trace, by: str = "word") -> Trace:
    """The trace over words (by="word": WordPiece ##, SentencePiece ▁ and byte-level Ġ pieces
    merged) or whole characters (by="char": the byte pieces of one character merged), with
    w'[I, J] = mean over i in I of sum over j in J of w[i, j] for weights and moved (rows still
    sum to 1); group I may attend group J when any of their pieces may. `meta["spans"]` holds
    each group's [start, end) pieces. An encoder-decoder's parts are grouped too (cross-attention:
    decoder words as rows, encoder words as columns)."""
    if by not in ("word", "char"):
        raise ValueError(f'by={by!r} must be "word" or "char"')
    if trace.unit != "pieces":
        raise ValueError(f"this trace is grouped by {trace.unit!r} already")
    out = _group_one(trace, by)
    enc_keys = groups_of(trace.tokens, by, _specials(trace, len(trace.tokens)), trace.source)
    for name, part in trace.parts.items():
        cross = part.is_cross and part.key_tokens == trace.tokens
        out.parts[name] = _group_one(part, by, enc_keys if cross else None)
    return out
