"""One text's head-role sums: for every head of every layer, each score's sum and count over the
query rows it counts, and the row where it is largest. The definitions are in
attnviz.measures.roles; this module only reads the weights, a band of query rows at a time.

A full layer is read as one band (its weights are stored). A lean layer (long inputs,
attnviz.engine.lean) is read in bands of rows recomputed from q, k and the log-sum-exp
(attnviz.engine.bands), so no n x n tensor of every head is ever held: memory grows with n.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from attnviz.engine.bands import BAND_CELLS, LN2

SCORES = (
    "previous_token",
    "first_token",
    "self",
    "duplicate_token",
    "induction",
    "entropy",
    "special",
    "punctuation",
)
EXTRA = ("distance",)
CONTEXT = 8  # tokens of context compared to find a repeated token's earlier occurrence
INDUCTION_CONTEXT = 2  # induction reads rows whose token and the one before it came before
# A broad example's row sees at least this many keys (or, in a shorter text, the most any row
# sees): a causal model's row 1 weighs its 2 keys 0.5/0.5 and has relative entropy 1, trivially.
BROAD_KEYS = 8


def repeats(tokens: Sequence[str], context: int = CONTEXT) -> list[tuple[int, int, int]]:
    """(i, j, m) for every row i whose token occurred before at a j with j + 1 < i: of those
    earlier occurrences, the one whose preceding tokens match i's for the most tokens, m (1 to
    `context`), the latest among equals. On text said twice that is i's counterpart in the first
    copy, where "the latest earlier occurrence" is often a nearer, unrelated one (a character
    model has seen "e" many times before the second "pencil"); a word said once before, as "the"
    in "the cat ... the", matches on itself alone (m = 1)."""
    # latest[k-1]: the k tokens ending at j -> (the latest such j, the one before it)
    latest: list[dict[tuple[str, ...], tuple[int, int | None]]] = [{} for _ in range(context)]
    found = []
    for i in range(len(tokens)):
        reach = min(context, i + 1)
        for k in range(reach, 0, -1):
            seen = latest[k - 1].get(tuple(tokens[i - k + 1 : i + 1]))
            if seen is None:
                continue
            j = seen[0] if seen[0] + 1 < i else seen[1]  # the latest may be the previous token
            if j is not None:
                found.append((i, j, k))
                break
        for k in range(1, reach + 1):
            gram = tuple(tokens[i - k + 1 : i + 1])
            last = latest[k - 1].get(gram)
            latest[k - 1][gram] = (i, None if last is None else last[0])
    return found


@dataclass
class Acc:
    """One score of one layer of one text, per head: the sum and count of its row values, and
    the largest value with its row and key (-inf and -1 while no row counted)."""

    total: torch.Tensor  # [head] float64
    n: int
    top: torch.Tensor  # [head] float64
    row: torch.Tensor  # [head] long
    key: torch.Tensor  # [head] long

    @classmethod
    def empty(cls, n_heads: int) -> Acc:
        zeros = torch.zeros(n_heads, dtype=torch.float64)
        minus = torch.full((n_heads,), -1, dtype=torch.long)
        return cls(zeros, 0, torch.full((n_heads,), float("-inf"), dtype=torch.float64), minus,
                   minus.clone())  # fmt: skip

    def add(
        self,
        values: torch.Tensor,
        rows: torch.Tensor,
        keys: torch.Tensor,
        pick: torch.Tensor | None = None,
    ) -> None:
        """values [head, r] of r counted rows at positions `rows` [r], the key each row shows
        `keys` ([head, r] or [r]); `pick` [r]: the rows that may be the example (default all;
        every row counts in the sum)."""
        r = values.shape[-1]
        if r == 0:
            return
        values = values.double().cpu()
        self.total += values.sum(-1)
        self.n += r
        ranked = values if pick is None else values.masked_fill(~pick.cpu(), float("-inf"))
        top, at = ranked.max(-1)  # [head]
        keys = keys.cpu().expand(values.shape[0], r)  # [head, r]
        better = top > self.top  # strictly: the earlier row keeps a tie
        self.top = torch.where(better, top, self.top)
        self.row = torch.where(better, rows.cpu()[at], self.row)
        self.key = torch.where(better, keys.gather(1, at[:, None])[:, 0], self.key)


def keys_seen(layer) -> torch.Tensor:
    """How many keys each query row may attend, from the mask (or the layer's rule). [q]"""
    return layer.allowed()


def _allowed(layer, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """May query rows[t] attend key cols[t], for each t. bool [t]"""
    return layer.block("mask", 0, rows, cols).diagonal().cpu()  # [t, t] for a band's few rows


def bands(layer) -> Iterator[tuple[int, int, int, torch.Tensor, torch.Tensor | None]]:
    """(r0, r1, c0, w, log2 w): every head's weights w [head, r1 - r0, c] of query rows
    r0..r1-1 on keys c0..c0+c-1 (the keys those rows may see), where the trace lives; masked
    weights are 0. A band recomputed from q and k comes with the exponent it was made from (log2
    of the weights where they are not masked), so the entropy needs no log; held weights, one
    band, with None (LayerTrace.weight_bands)."""
    return layer.weight_bands(BAND_CELLS)


def _at(
    acc: Acc, w: torch.Tensor, c0: int, rows: torch.Tensor, ok: torch.Tensor, cols: torch.Tensor
) -> None:
    """Add w[:, t, cols[t]] of the band's rows t where ok (w's keys start at c0)."""
    t = ok.nonzero()[:, 0]  # [r']
    values = w[:, t.to(w.device), (cols[t] - c0).to(w.device)]  # [head, r']
    acc.add(values, rows[t], cols[t])


def layer_sums(
    layer, cross: bool, pairs: list[tuple[int, int, int]], keysets: dict[str, list[int]]
) -> dict[str, Acc]:
    """Every score's Acc for one block of one text. A row counts only where it may see at least
    two keys (one key is weight 1 forced by the mask, not chosen by the head), and for a score
    read at one key only where that key is one it may see. `pairs`: repeats(tokens) (induction
    reads those whose context matches for two tokens or more);
    `keysets`: key positions of "special" and "punctuation"."""
    n_heads = layer.n_heads
    names = ["first_token", "entropy", *keysets] if cross else [*SCORES, *EXTRA]
    acc = {name: Acc.empty(n_heads) for name in names}
    seen = keys_seen(layer)  # [q]
    wide = seen >= 2  # [q]
    broad_keys = min(BROAD_KEYS, int(seen.max())) if len(seen) else BROAD_KEYS
    pair_i = torch.tensor([p[0] for p in pairs], dtype=torch.long)  # [p]
    pair_j = torch.tensor([p[1] for p in pairs], dtype=torch.long)  # [p]
    pair_m = torch.tensor([p[2] for p in pairs], dtype=torch.long)  # [p]
    for r0, r1, c0, w, expo in bands(layer):
        dev, c = w.device, w.shape[-1]
        rows = torch.arange(r0, r1)  # [r]
        live = wide[r0:r1]  # [r]
        t = live.nonzero()[:, 0]  # [r'] the band's counted rows
        every = len(t) == len(rows)
        wt = w if every else w[:, t.to(dev)]  # [head, r', c]
        top = wt.argmax(-1) + c0  # [head, r'] the key each counted row weighs most
        keys = torch.arange(c0, c0 + c)  # [c]
        later = live & (rows >= 1)
        zero = torch.zeros_like(rows)
        _at(acc["first_token"], w, c0, rows, later & _allowed(layer, rows, zero), zero)
        if expo is None:
            entropy = torch.special.entr(wt).sum(-1)  # [head, r'] nats
        else:  # H = -sum w ln w, ln w = log2 w · ln 2 (masked cells have w = 0)
            et = expo if every else expo[:, t.to(dev)]  # [head, r', c]
            entropy = (wt * et).sum(-1) * -LN2
        entropy = entropy / seen[rows[t]].to(dev, torch.float64).log()
        acc["entropy"].add(entropy, rows[t], top, seen[rows[t]] >= broad_keys)
        for name, positions in keysets.items():
            on = torch.tensor([p - c0 for p in positions if c0 <= p < c0 + c], dtype=torch.long)
            part = wt[..., on.to(dev)]  # [head, r', p]
            at_key = on.to(dev)[part.argmax(-1)] + c0 if len(on) else torch.zeros_like(t)
            acc[name].add(part.sum(-1), rows[t], at_key)
        if cross:
            continue
        prev = (rows - 1).clamp_min(0)
        _at(acc["previous_token"], w, c0, rows, later & _allowed(layer, rows, prev), prev)
        _at(acc["self"], w, c0, rows, live & _allowed(layer, rows, rows), rows)
        dist = (rows[t][:, None] - keys[None, :]).abs().to(dev, w.dtype)  # [r', c]
        acc["distance"].add((wt * dist).sum(-1), rows[t], top)
        inside = (pair_i >= r0) & (pair_i < r1)
        i, j = pair_i[inside], pair_j[inside]  # [p'] repeats whose row is in the band
        span = pair_m[inside] >= INDUCTION_CONTEXT  # [p'] inside a repeated stretch of text
        for name, key, rows_ok in (("duplicate_token", j, wide[i]), ("induction", j + 1, span)):
            use = rows_ok & wide[i] & _allowed(layer, i, key)
            values = w[:, (i[use] - r0).to(dev), (key[use] - c0).to(dev)]  # [head, p'']
            acc[name].add(values, i[use], key[use])
    return acc
