"""Two traces of the same model compared head by head: a sentence and its edit ("it" -> "they"),
a prompt with and without a distractor. Which heads changed most?

Tokens are aligned where the two tokenizations agree: difflib's longest matching runs of equal
tokens (position i of `a` with position i' of `b`). For each head and each aligned query pair,
the change of its row is

    0.5 * (sum over aligned keys |x_a[i, j] - x_b[i', j']|
           + x_a on a's other keys + x_b on b's other keys)

(the total variation distance for weights, in [0, 1]: an edited key's weight counts as changed),
averaged over the aligned queries. For `moved` the same sum is in moved's own units, and
`change_rel` divides it by the rows' mean total moved. When fewer than half of the shorter
input's tokens align (another language, another text), only per-head statistics are compared
(head_stats of each), and `method` says so.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import torch

from attnviz.engine.lean import BLOCK_CELLS
from attnviz.engine.stats import head_stats
from attnviz.engine.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

COMPARED_STATS = ("entropy_rel", "max_weight", "distance", "first", "special")


def aligned(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Pairs (i in a, i' in b) of equal tokens on difflib's matching runs, in order."""
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [(m.a + t, m.b + t) for m in matcher.get_matching_blocks() for t in range(m.size)]


def _check(a: Trace, b: Trace) -> None:
    same = (a.source, a.n_layers, a.n_heads) == (b.source, b.n_layers, b.n_heads)
    if not same:
        raise ValueError(
            f"compare needs two traces of the same model: {a.source!r} ({a.n_layers} x "
            f"{a.n_heads}) and {b.source!r} ({b.n_layers} x {b.n_heads})"
        )


def _aligned_change(a: Trace, b: Trace, pairs: list[tuple[int, int]], field: str) -> dict:
    """Per head: the mean over aligned queries of the row change, and of the rows' mass."""
    qa = torch.tensor([i for i, _ in pairs if i < a.layers[0].n_q])
    qb = torch.tensor([j for i, j in pairs if i < a.layers[0].n_q])
    keys = [(i, j) for i, j in pairs if i < a.layers[0].n_k and j < b.layers[0].n_k]
    ka = torch.tensor([i for i, _ in keys], dtype=torch.long)
    kb = torch.tensor([j for _, j in keys], dtype=torch.long)
    step = max(1, BLOCK_CELLS // max(1, a.layers[0].n_k + b.layers[0].n_k))
    shape = (a.n_layers, a.n_heads)
    change, mass = torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
    for layer, (la, lb) in enumerate(zip(a.layers, b.layers, strict=True)):
        for h in range(la.n_heads):
            for r0 in range(0, len(qa), step):
                xa = la.block(field, h, qa[r0 : r0 + step]).double()  # [r, k_a]
                xb = lb.block(field, h, qb[r0 : r0 + step]).double()  # [r, k_b]
                both = (xa[:, ka] - xb[:, kb]).abs().sum()
                only = xa.sum() - xa[:, ka].sum() + xb.sum() - xb[:, kb].sum()
                change[layer, h] += 0.5 * float(both + only)
                mass[layer, h] += 0.5 * float(xa.sum() + xb.sum())
    n = max(1, len(qa))
    return {"change": change / n, "mass": mass / n}


def compare(a: Trace, b: Trace, field: str = "weights") -> pd.DataFrame:
    """Every head of two traces of one model, ranked by how much its `field` ("weights" or
    "moved") changed from a to b (see the module's docstring for the rule).

    Columns: rank (1 = changed most), layer, head, change (mean over aligned queries of the
    rows' total variation; NaN without alignment), change_rel (change over the rows' mean mass:
    equal to change for weights), d_entropy_rel, d_max_weight, d_distance, d_first, d_special
    (b's head statistic minus a's, attnviz.engine.stats.head_stats), method ("aligned": ranked
    by change_rel; "statistics": under half the tokens aligned, ranked by the largest |d_...|
    over its column's largest). `attrs`: aligned (the pairs of positions), n_aligned."""
    import pandas as pd

    if field not in ("weights", "moved"):
        raise ValueError(f'field={field!r} must be "weights" or "moved"')
    _check(a, b)
    pairs = aligned(list(a.tokens), list(b.tokens))
    if 2 * len(pairs) < min(len(a.tokens), len(b.tokens)):  # too little in common to align
        pairs = []
    sa, sb = head_stats(a), head_stats(b)
    rows = []
    got = _aligned_change(a, b, pairs, field) if pairs else None
    for layer in range(a.n_layers):
        for h in range(a.n_heads):
            row = {"layer": layer, "head": h}
            if got is not None:
                change, mass = float(got["change"][layer, h]), float(got["mass"][layer, h])
                row |= {"change": change, "change_rel": change / mass if mass > 0 else 0.0}
            else:
                row |= {"change": float("nan"), "change_rel": float("nan")}
            row |= {f"d_{s}": float(sb[s][layer, h] - sa[s][layer, h]) for s in COMPARED_STATS}
            rows.append(row)
    table = pd.DataFrame(rows)
    if pairs:
        table["method"] = "aligned"
        key = table["change_rel"]
    else:
        table["method"] = "statistics"
        deltas = table[[f"d_{s}" for s in COMPARED_STATS]]
        key = (deltas.abs() / deltas.abs().max().replace(0, 1)).max(axis=1)
    table = table.iloc[key.sort_values(ascending=False, kind="stable").index].reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    table.attrs.update(aligned=pairs, n_aligned=len(pairs))
    return table
