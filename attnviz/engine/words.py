"""Attention between words (or whole characters) instead of pieces: `grouped(trace, by)`.

For groups of query pieces I and key pieces J (engine/pieces.py says which pieces make a word):

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

from dataclasses import dataclass

import torch

from attnviz.engine.bands import _bins, _indicator
from attnviz.engine.lean import BLOCK_CELLS, _index
from attnviz.engine.pieces import Groups, groups_of
from attnviz.engine.trace import LayerTrace, Trace

FIELDS = ("weights", "moved", "mask")


def _no_scores(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    raise ValueError(
        "a trace grouped into words keeps weights, moved and the mask only: scores, q, k, v and z "
        "do not add up over pieces. Read them on the trace of pieces"
    )


@dataclass
class GroupedLayer(LayerTrace):
    """A LayerTrace over groups of pieces. `base` is the layer of pieces when its fields are
    grouped on access (a lean trace), else None (grouped at once and stored)."""

    base: LayerTrace | None = None
    row_groups: Groups | None = None
    col_groups: Groups | None = None
    grouped = True  # compact() and the views: nothing of it is recomputed from q and k

    def block(
        self,
        name: str,
        h: int,
        rows: slice | torch.Tensor | None = None,
        cols: slice | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Head h's grouped weights, moved or mask on rows x cols of groups. [rows, cols]"""
        if name not in FIELDS:
            raise ValueError(f"block name={name!r}: a grouped layer has {', '.join(FIELDS)}")
        if self.base is None:
            return super().block(name, h, rows, cols)
        g_rows = _index(rows, len(self.row_groups))
        g_cols = _index(cols, len(self.col_groups))
        return _reduce(self, name, h, g_rows, g_cols)

    def pooled(self, th: int, tw: int, name: str = "weights") -> torch.Tensor:
        """Every head's grouped `name` average-pooled to at most th x tw (adaptive_avg_pool2d's
        bins), a band of rows at a time. [head, <=th, <=tw] CPU float32"""
        n_q, n_k = len(self.row_groups), len(self.col_groups)
        th, tw = min(th, n_q), min(tw, n_k)
        row_s, row_e = _bins(n_q, th)
        col_s, col_e = _bins(n_k, tw)
        cmat = _indicator(col_s, col_e, 0, n_k).T  # [k, tw]
        out = torch.zeros(self.n_heads, th, tw)
        step = _band_rows(self.row_groups, self.col_groups.n)
        all_cols = torch.arange(n_k)
        for h in range(self.n_heads):
            for r0 in range(0, n_q, step):
                r1 = min(n_q, r0 + step)
                w = self.block(name, h, torch.arange(r0, r1), all_cols).float()  # [r, k]
                out[h] += _indicator(row_s, row_e, r0, r1) @ (w @ cmat)  # [th, tw]
        area = ((row_e - row_s).unsqueeze(1) * (col_e - col_s).unsqueeze(0)).float()
        return out / area


def _band_rows(groups: Groups, n_k: int) -> int:
    """Groups of rows per band so that a band's pieces x keys stay near BLOCK_CELLS."""
    longest = max((e - s for s, e in groups.spans), default=1)
    return max(1, BLOCK_CELLS // max(1, n_k * longest))


def _reduce(
    layer: GroupedLayer, name: str, h: int, g_rows: torch.Tensor, g_cols: torch.Tensor
) -> torch.Tensor:
    """The grouped block of the base layer's pieces, a band of group rows at a time."""
    rg, cg = layer.row_groups, layer.col_groups
    sort = torch.sort(g_cols)
    col_pieces = cg.pieces(sort.values) if len(g_cols) else torch.zeros(0, dtype=torch.long)
    csum = cg.sum_cols(sort.values)  # [pieces, cols] in sorted order
    out = torch.zeros(len(g_rows), len(g_cols))
    step = _band_rows(rg, len(col_pieces))
    for r0 in range(0, len(g_rows), step):
        band = g_rows[r0 : r0 + step]
        order = torch.sort(band)
        pieces = rg.pieces(order.values)
        mean = rg.mean_rows(order.values)  # [band, pieces]
        block = layer.base.block(name, h, pieces, col_pieces).float()  # [pieces, col pieces]
        got = mean @ block @ csum  # [band, cols]; a mask: > 0 where any piece may attend any
        res = torch.empty_like(got)
        res[order.indices] = got
        out[r0 : r0 + len(band), sort.indices] = res
    return out > 0 if name == "mask" else out


def _lazy(name: str):
    def field(layer: GroupedLayer, head: int | None = None) -> torch.Tensor:
        if head is None:
            return torch.stack([layer.block(name, h) for h in range(layer.n_heads)])
        return layer.block(name, head)

    return field


def grouped_weights(layer: GroupedLayer, head: int | None = None) -> torch.Tensor:
    """A lazily grouped layer's weights: [head, q, k], or [q, k] for one head."""
    return _lazy("weights")(layer, head)


def grouped_moved(layer: GroupedLayer, head: int | None = None) -> torch.Tensor:
    """A lazily grouped layer's moved: [head, q, k], or [q, k] for one head."""
    return _lazy("moved")(layer, head)


def grouped_mask(layer: GroupedLayer, head: int | None = None) -> torch.Tensor:
    """A lazily grouped layer's mask [q, k] (the same for every head)."""
    return layer.block("mask", 0)


def group_layer(layer: LayerTrace, rows: Groups, cols: Groups) -> GroupedLayer:
    """One layer over groups of its pieces (see the module's docstring for the rule)."""
    h, n_q, n_k = layer.n_heads, len(rows), len(cols)
    stand_in = dict(
        q=torch.zeros(h, n_q, 0),  # [head, q, 0]: does not group
        k=torch.zeros(h, n_k, 0),  # [head, k, 0]
        v=torch.zeros(h, n_k, 0),
        z=torch.zeros(h, n_q, 0),
        output=torch.zeros(n_q, 0),
        scores=_no_scores,
        scale=layer.scale,
        row_groups=rows,
        col_groups=cols,
    )
    has_moved = layer.__dict__.get("_stored_f_norm") is not None or not callable(
        layer.__dict__.get("_stored_moved")
    )
    if layer.lean or getattr(layer, "base", None) is not None:
        return GroupedLayer(
            weights=grouped_weights,
            moved=grouped_moved if has_moved else _no_moved,
            mask=grouped_mask,
            base=layer,
            **stand_in,
        )
    r = rows.mean_rows(torch.arange(n_q))  # [q', q]
    c = cols.sum_cols(torch.arange(n_k))  # [k, k']
    mask = None
    if layer.mask is not None:
        mask = (r @ layer.mask.float() @ c) > 0  # [q', k']
    return GroupedLayer(
        weights=r @ layer.weights @ c,  # [head, q', k']
        moved=r @ layer.moved @ c if has_moved else _no_moved,  # [head, q', k']
        mask=mask,
        **stand_in,
    )


def _no_moved(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    raise ValueError("the trace of pieces has no per-key norms, so neither has its grouping")


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
    mean = rows.mean_rows(torch.arange(len(rows)))  # [q', q]
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
        hidden=None if trace.hidden is None else mean @ trace.hidden,  # [q', d_model]
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
    if trace.meta.get("grouped"):
        raise ValueError(f"this trace is grouped by {trace.meta['grouped']!r} already")
    out = _group_one(trace, by)
    enc_keys = groups_of(trace.tokens, by, _specials(trace, len(trace.tokens)), trace.source)
    for name, part in trace.parts.items():
        cross = part.is_cross and part.key_tokens == trace.tokens
        out.parts[name] = _group_one(part, by, enc_keys if cross else None)
    return out
