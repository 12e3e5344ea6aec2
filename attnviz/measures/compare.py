"""Two traces of the same model compared head by head: a sentence and its edit ("it" -> "they"),
a prompt with and without a distractor. Which heads changed most?

Tokens are aligned where the two tokenizations agree: difflib's longest matching runs of equal
tokens (position i of `a` with position i' of `b`). For each head and each aligned query pair,
the change of its row is

    0.5 * (sum over aligned keys |x_a[i, j] - x_b[i', j']|
           + x_a on a's other keys + x_b on b's other keys)

(the total variation distance for weights, in [0, 1]: an edited key's weight counts as changed),
averaged over the aligned queries. For `moved` the same sum is in moved's own units, and
`change_rel` divides it by the rows' mean total moved. Weights have no `change_rel`: every row
sums to 1, so their mean mass is 1 and it would repeat `change`. When fewer than half of the shorter
input's tokens align (another language, another text), only per-head statistics are compared
(head_stats of each), and `method` says so.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

import torch

from attnviz.engine.trace import Trace, rows_per_band
from attnviz.measures.stats import head_stats

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


def _aligned_change(
    a: Trace, b: Trace, pairs: list[tuple[int, int]], fields: tuple[str, ...]
) -> dict[str, dict]:
    """Per field and head: the mean over aligned queries of the row change, and of the rows'
    mass. Lean layers a band of aligned rows of every head at a time (engine/bands.band: the
    overview's fast path), others a block of rows of one head at a time."""
    qa = torch.tensor([i for i, _ in pairs if i < a.layers[0].n_q], dtype=torch.long)
    qb = torch.tensor([j for i, j in pairs if i < a.layers[0].n_q], dtype=torch.long)
    keys = [(i, j) for i, j in pairs if i < a.layers[0].n_k and j < b.layers[0].n_k]
    ka = torch.tensor([i for i, _ in keys], dtype=torch.long)
    kb = torch.tensor([j for _, j in keys], dtype=torch.long)
    shape = (a.n_layers, a.n_heads)
    out = {
        f: {"change": torch.zeros(shape, dtype=torch.float64),
            "mass": torch.zeros(shape, dtype=torch.float64)}
        for f in fields
    }  # fmt: skip
    for layer, (la, lb) in enumerate(zip(a.layers, b.layers, strict=True)):
        if la.in_bands and lb.in_bands:
            _lean_change(la, lb, pairs, {f: {k: v[layer] for k, v in got.items()}
                                         for f, got in out.items()})  # fmt: skip
            continue
        step = rows_per_band(la.n_k + lb.n_k)
        for h in range(la.n_heads):
            for r0 in range(0, len(qa), step):
                for f in fields:
                    xa = la.block(f, h, qa[r0 : r0 + step]).double()  # [r, k_a]
                    xb = lb.block(f, h, qb[r0 : r0 + step]).double()  # [r, k_b]
                    _add({f: out[f]}, (layer, h), {f: xa}, {f: xb}, ka, kb)
    n = max(1, len(qa))
    return {f: {k: v / n for k, v in got.items()} for f, got in out.items()}


def _add(out: dict, at, rows_a: dict, rows_b: dict, ka, kb) -> None:
    """Add rows' change and mass (per field: [r, k] of one head, or [head, r, k]) at `at`."""
    for f, got in out.items():
        xa, xb = rows_a[f], rows_b[f]
        dims = tuple(range(xa.dim() - 2, xa.dim()))  # the rows and keys
        both = (xa[..., ka] - xb[..., kb]).abs().sum(dims)
        only = xa.sum(dims) - xa[..., ka].sum(dims) + xb.sum(dims) - xb[..., kb].sum(dims)
        got["change"][at] += 0.5 * (both + only).double().cpu()
        got["mass"][at] += 0.5 * (xa.sum(dims) + xb.sum(dims)).double().cpu()


def runs(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """The aligned pairs as runs (start in a, start in b, length) of consecutive positions."""
    out: list[list[int]] = []
    for i, j in pairs:
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            out[-1][2] += 1
        else:
            out.append([i, j, 1])
    return [tuple(r) for r in out]


def _lean_change(la, lb, pairs: list[tuple[int, int]], out: dict) -> None:
    """_aligned_change of two lean layers into out[field]["change" | "mass"] ([head] views of
    the layer's rows): bands of aligned rows (a run maps a's rows to b's by an offset, so both
    are contiguous), every head at once from the overview's recomputed band (engine/bands.band),
    the aligned keys as runs of slices: nothing gathered, nothing n x n."""
    from attnviz.engine.bands import BAND_CELLS, band

    step = max(16, BAND_CELLS // max(1, la.n_heads * max(la.n_k, lb.n_k)))
    key_runs = [(i, j, n) for i, j, n in runs(pairs)]
    key_runs = [(i, j, min(n, la.n_k - i, lb.n_k - j)) for i, j, n in key_runs]
    norms = {"a": None, "b": None}
    if "moved" in out:
        norms = {"a": la.norms(), "b": lb.norms()}  # [head, k]
    for qa0, qb0, size in runs([(i, j) for i, j in pairs if i < la.n_q and j < lb.n_q]):
        for r in range(0, size, step):
            n_r = min(step, size - r)
            wa, _, ca0, ca1 = band(la, qa0 + r, qa0 + r + n_r)  # [head, r, c_a]
            wb, _, cb0, cb1 = band(lb, qb0 + r, qb0 + r + n_r)  # [head, r, c_b]
            for field, got in out.items():
                xa, xb = wa, wb
                if field == "moved":
                    xa = wa * norms["a"][:, None, ca0:ca1].to(wa.device)
                    xb = wb * norms["b"][:, None, cb0:cb1].to(wb.device)
                change, mass_a, mass_b = _run_sums(xa, xb, (ca0, ca1), (cb0, cb1), key_runs)
                total_a, total_b = xa.sum((1, 2)).double(), xb.sum((1, 2)).double()
                got["change"] += 0.5 * (change + total_a - mass_a + total_b - mass_b).cpu()
                got["mass"] += 0.5 * (total_a + total_b).cpu()


def _run_sums(xa, xb, span_a: tuple[int, int], span_b: tuple[int, int], key_runs) -> tuple:
    """Over the aligned keys of two bands [head, r, c] covering keys span_a and span_b (zero
    outside): Σ|xa − xb|, Σ xa and Σ xb, per head (float64)."""
    (ca0, ca1), (cb0, cb1) = span_a, span_b
    heads = xa.shape[0]
    change = torch.zeros(heads, dtype=torch.float64, device=xa.device)
    mass_a, mass_b = change.clone(), change.clone()
    for ka0, kb0, n in key_runs:
        # run positions t = 0..n-1 are keys ka0 + t of a and kb0 + t of b
        a_lo, a_hi = max(0, ca0 - ka0), min(n, ca1 - ka0)  # where a's band has the key
        b_lo, b_hi = max(0, cb0 - kb0), min(n, cb1 - kb0)
        if a_hi > a_lo:
            mass_a += xa[:, :, ka0 + a_lo - ca0 : ka0 + a_hi - ca0].sum((1, 2)).double()
        if b_hi > b_lo:
            mass_b += xb[:, :, kb0 + b_lo - cb0 : kb0 + b_hi - cb0].sum((1, 2)).double()
        lo, hi = max(a_lo, b_lo), min(a_hi, b_hi)  # both have it: |a − b|; one only: its mass
        if hi > lo:
            pa = xa[:, :, ka0 + lo - ca0 : ka0 + hi - ca0]
            pb = xb[:, :, kb0 + lo - cb0 : kb0 + hi - cb0]
            change += (pa - pb).abs().sum((1, 2)).double() - pa.sum((1, 2)) - pb.sum((1, 2))
    # weights and moved are >= 0: where one side is 0, |a − b| is the other's value
    return change + mass_a + mass_b, mass_a, mass_b


def compare(a: Trace, b: Trace, field: str = "weights") -> pd.DataFrame:
    """Every head of two traces of one model, ranked by how much its `field` ("weights" or
    "moved") changed from a to b: compare_fields(a, b, (field,))[field] (its docstring says
    what the columns hold)."""
    return compare_fields(a, b, (field,))[field]


def compare_fields(
    a: Trace, b: Trace, fields: tuple[str, ...] = ("weights", "moved")
) -> dict[str, pd.DataFrame]:
    """Every head of two traces of one model, ranked by how much each of `fields` ("weights",
    "moved") changed from a to b (see the module's docstring for the rule): a table per field,
    from one pass over both traces.

    Columns: rank (1 = changed most), layer, head, change (mean over aligned queries of the
    rows' total variation; NaN without alignment), change_rel (moved only: change over the rows'
    mean total moved; weights' rows sum to 1, where it would equal change), d_entropy_rel,
    d_max_weight, d_distance, d_first, d_special (b's head statistic of the weights minus a's,
    attnviz.measures.stats.head_stats), method ("aligned": ranked by change_rel, weights by
    change; "statistics": under half the tokens aligned, ranked by the largest |d_...| over its
    column's largest), score (what the rank sorts by). `attrs`: aligned (the pairs of
    positions), n_aligned."""
    import pandas as pd

    for field in fields:
        if field not in ("weights", "moved"):
            raise ValueError(f'field={field!r} must be "weights" or "moved"')
    _check(a, b)
    pairs = aligned(list(a.tokens), list(b.tokens))
    if 2 * len(pairs) < min(len(a.tokens), len(b.tokens)):  # too little in common to align
        pairs = []
    sa, sb = head_stats(a), head_stats(b)
    changes = _aligned_change(a, b, pairs, tuple(fields)) if pairs else {}
    return {f: _table(pd, a, changes.get(f), (sa, sb), pairs, f) for f in fields}


def _table(pd, a: Trace, got: dict | None, stats: tuple, pairs: list, field: str) -> pd.DataFrame:
    sa, sb = stats
    rel = field == "moved"  # weights' rows sum to 1: change over their mass is change again
    rows = []
    for layer in range(a.n_layers):
        for h in range(a.n_heads):
            change = mass = float("nan")
            if got is not None:
                change, mass = float(got["change"][layer, h]), float(got["mass"][layer, h])
            row = {"layer": layer, "head": h, "change": change}
            if rel:
                row["change_rel"] = change / mass if mass != 0 else 0.0  # NaN stays NaN
            row |= {f"d_{s}": float(sb[s][layer, h] - sa[s][layer, h]) for s in COMPARED_STATS}
            rows.append(row)
    table = pd.DataFrame(rows)
    if pairs:
        table["method"] = "aligned"
        key = table["change_rel" if rel else "change"]
    else:
        table["method"] = "statistics"
        deltas = table[[f"d_{s}" for s in COMPARED_STATS]]
        key = (deltas.abs() / deltas.abs().max().replace(0, 1)).max(axis=1)
    table["score"] = key
    table = table.iloc[key.sort_values(ascending=False, kind="stable").index].reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    table.attrs.update(aligned=pairs, n_aligned=len(pairs))
    return table
