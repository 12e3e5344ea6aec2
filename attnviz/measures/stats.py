"""Statistics of a trace's weights: per-head summaries, how far a what-if moved them, which heads
link two tokens, how much of each head's attention and movement reaches special tokens (the
Kobayashi comparison). Plain tensors in and out; no streamlit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from attnviz.engine.trace import LayerTrace, Trace
from attnviz.engine.writes import row_shares

if TYPE_CHECKING:
    import pandas as pd


def head_stats(trace: Trace, field: str = "weights") -> dict[str, torch.Tensor]:
    """Per-head statistics, each a [layer, head] tensor averaged over query rows.

    entropy: mean row entropy in nats; entropy_rel: that over log(allowed keys), 1 = uniform;
    max_weight: mean of each row's largest weight; distance: mean |query pos - key pos| weighted;
    self / prev / first: mean weight on the token itself, the one before it, the first one;
    special: mean weight on the trace's special tokens ([CLS], [SEP]; 0 when there are none).
    field="moved": the same statistics of each row of `moved` scaled to sum to 1 (where what
    reaches the query comes from, weighed by what each key sends: engine/writes.py).
    A lean trace (long input) is summed a band of rows at a time, never n x n for all heads.
    """
    if field not in ("weights", "moved"):
        raise ValueError(f'field={field!r} must be "weights" or "moved"')
    if any(layer.in_bands for layer in trace.layers):
        return _head_stats_in_bands(trace, field)
    if not all(layer.holds_maps for layer in trace.layers):
        return _head_stats_in_blocks(trace, field)  # e.g. words grouped on access
    if field == "moved":
        w = torch.stack([row_shares(layer.moved) for layer in trace.layers])  # [l, h, q, k]
    else:
        w = trace.weights()  # [layer, head, q, k]
    n_q, n_k = w.shape[-2:]
    everything = torch.ones(n_q, n_k, dtype=torch.bool)  # [q, k]
    # Each layer's own mask: a decoder may mix full and sliding-window layers.
    allowed = torch.stack([everything if la.mask is None else la.mask for la in trace.layers])
    n_allowed = allowed.sum(-1)  # [layer, q]
    live = n_allowed > 0  # [layer, q] rows that attend at all

    def row_mean(x: torch.Tensor, rows: torch.Tensor = live) -> torch.Tensor:
        # x: [layer, head, q] -> [layer, head], averaged over each layer's chosen query rows
        rows = rows.expand(n_allowed.shape).unsqueeze(1).to(x.dtype)  # [layer, 1, q]
        return (x * rows).sum(-1) / rows.sum(-1).clamp_min(1)

    plogp = torch.where(w > 0, w * w.clamp_min(1e-30).log(), torch.zeros(()))
    entropy = -plogp.sum(-1)  # [layer, head, q]
    max_h = torch.log(n_allowed.clamp_min(2).to(w.dtype)).unsqueeze(1)  # [layer, 1, q]
    wide = n_allowed > 1  # [layer, q]

    qi = torch.arange(n_q).unsqueeze(1)  # [q, 1]
    kj = torch.arange(n_k).unsqueeze(0)  # [1, k]
    dist = (w * (qi - kj).abs().to(w.dtype)).sum(-1)  # [layer, head, q]

    diag = torch.zeros(w.shape[:-1])  # [layer, head, q]
    m = min(n_q, n_k)
    diag[..., :m] = w[..., torch.arange(m), torch.arange(m)]
    prev = torch.zeros(w.shape[:-1])  # [layer, head, q]
    if n_q > 1 and n_k > 1:
        rows = torch.arange(1, min(n_q, n_k + 1))
        prev[..., rows] = w[..., rows, rows - 1]
    specials = sorted({p for ps in trace.special.values() for p in ps if p < n_k})
    special = w[..., specials].sum(-1) if specials else torch.zeros(w.shape[:-1])

    return {
        "entropy": row_mean(entropy),
        "entropy_rel": row_mean(entropy / max_h, wide),
        "max_weight": row_mean(w.amax(-1)),
        "distance": row_mean(dist),
        "self": row_mean(diag),
        "prev": row_mean(prev, live & (torch.arange(n_q) > 0)),
        "first": row_mean(w[..., 0]),
        "special": row_mean(special),
    }


STATS = ("entropy", "entropy_rel", "max_weight", "distance", "self", "prev", "first", "special")


def _head_stats_in_bands(trace: Trace, field: str = "weights") -> dict[str, torch.Tensor]:
    """head_stats, the same definitions, from one pass over bands of rows per layer (all heads
    together; attnviz.engine.bands, shared with the overview's pooled map and memoized; moved's
    is a pass of its own, made when asked)."""
    from attnviz.engine.bands import THUMB, specials_of, summaries, summarize_moved

    specials = specials_of(trace)
    if field == "moved":
        parts = [summarize_moved(layer, specials) for layer in trace.layers]
    else:
        parts = summaries(trace.layers, (THUMB, THUMB), specials)
    which = {"entropy_rel": "wide", "prev": "prev"}
    return {
        name: torch.stack(
            [(p.sums[name] / max(1, p.rows[which.get(name, "live")])).float() for p in parts]
        )  # [layer, head]  # fmt: skip
        for name in STATS
    }


def _head_stats_in_blocks(trace: Trace, field: str) -> dict[str, torch.Tensor]:
    """head_stats from each head's blocks of rows (a lean trace's moved, a trace of words grouped
    on access): the dense path's definitions, a band of rows of one head at a time."""
    from attnviz.engine.lean import BLOCK_CELLS

    sums = {name: torch.zeros(trace.n_layers, trace.n_heads, dtype=torch.float64) for name in STATS}
    counts = dict.fromkeys(("live", "wide", "prev"), 0)
    n_k = trace.layers[0].n_k
    specials = sorted({p for ps in trace.special.values() for p in ps if p < n_k})
    for i, layer in enumerate(trace.layers):
        step = max(1, BLOCK_CELLS // max(1, n_k))
        for r0 in range(0, layer.n_q, step):
            rows = torch.arange(r0, min(layer.n_q, r0 + step))
            n_allowed = layer.block("mask", 0, rows).sum(-1)  # [r]
            ok = {"live": n_allowed > 0, "wide": n_allowed > 1}
            ok["prev"] = ok["live"] & (rows > 0)
            if i == 0:
                counts = {name: counts[name] + int(ok[name].sum()) for name in counts}
            max_h = torch.log(n_allowed.clamp_min(2).double())  # [r]
            for h in range(layer.n_heads):
                w = layer.block(field, h, rows).double()  # [r, k]
                w = row_shares(w) if field == "moved" else w
                row = _row_stats(w, rows, specials)  # name -> [r]
                row["entropy_rel"] = row["entropy"] / max_h * ok["wide"]
                for name, value in row.items():
                    keep = ok["prev"] if name == "prev" else ok["live"]
                    sums[name][i, h] += float((value * keep).sum())
    which = {"entropy_rel": "wide", "prev": "prev"}
    return {name: (sums[name] / max(1, counts[which.get(name, "live")])).float() for name in STATS}


def _row_stats(w: torch.Tensor, rows: torch.Tensor, specials: list[int]) -> dict:
    """Each row's value of every statistic but entropy_rel, for rows `rows` of one head. [r] each"""
    n_r, n_k = w.shape
    plogp = torch.where(w > 0, w * w.clamp_min(1e-300).log(), torch.zeros((), dtype=w.dtype))

    def at(cols: torch.Tensor) -> torch.Tensor:  # w[i, cols[i]], 0 outside the keys
        inside = (cols >= 0) & (cols < n_k)
        return torch.where(inside, w[torch.arange(n_r), cols.clamp(0, n_k - 1)], 0.0)

    return {
        "entropy": -plogp.sum(-1),
        "max_weight": w.amax(-1),
        "distance": (w * (rows.unsqueeze(1) - torch.arange(n_k)).abs().double()).sum(-1),
        "self": at(rows),
        "prev": at(rows - 1),
        "first": w[:, 0],
        "special": w[:, specials].sum(-1) if specials else torch.zeros(n_r, dtype=w.dtype),
    }


def layer_saturation(layer, specials: tuple[int, ...] | None = None) -> tuple[float, float]:
    """mean_max_weight and mean_entropy of every head and row of one layer, from the same pass
    over bands as the overview (a lean layer: never its n x n maps at once). `specials`: the
    trace's (bands.specials_of), so that the pass is the one the overview makes."""
    from attnviz.engine.bands import THUMB, summarize

    part = summarize(layer, (THUMB, THUMB), specials)
    cells = layer.n_heads * layer.n_q
    return float(part.sums["max_weight"].sum()) / cells, float(part.sums["entropy"].sum()) / cells


def saturation(trace: Trace, layer: int) -> tuple[float, float]:
    """How saturated a layer's softmax is: the mean largest weight and the mean row entropy over
    every head and row (a lean layer from the overview's pass over bands, never n x n at once)."""
    from attnviz.engine.bands import specials_of

    lt = trace.layers[layer]
    if lt.in_bands:
        return layer_saturation(lt, specials_of(trace))
    w = lt.weights  # [head, q, k]
    return mean_max_weight(w), mean_entropy(w)


def mean_max_weight(weights: torch.Tensor) -> float:
    """Mean over rows of the largest weight: 1/n_k for uniform rows, 1 for one-hot rows."""
    return float(weights.amax(-1).mean())


def mean_entropy(weights: torch.Tensor) -> float:
    """Mean row entropy in nats."""
    plogp = torch.where(weights > 0, weights * weights.clamp_min(1e-30).log(), torch.zeros(()))
    return float(-plogp.sum(-1).mean())


def weight_shift(new: Trace, base: Trace) -> torch.Tensor:
    """How far each head's weights moved: mean over queries of the total variation distance
    0.5 · Σ_k |new − base|, in [0, 1]. [layer, head]"""
    if any(lt.in_bands for lt in new.layers + base.layers):
        return _weight_shift_in_blocks(new, base)
    a, b = new.weights(), base.weights()  # [layer, head, q, k]
    if a.shape != b.shape:
        raise ValueError(f"traces differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    return 0.5 * (a - b).abs().sum(-1).mean(-1)


def _weight_shift_in_blocks(new: Trace, base: Trace) -> torch.Tensor:
    """weight_shift a block of rows of one head at a time (long inputs: never n x n at once)."""
    from attnviz.engine.lean import BLOCK_CELLS

    shapes = [(lt.n_heads, lt.n_q, lt.n_k) for lt in new.layers]
    if shapes != [(lt.n_heads, lt.n_q, lt.n_k) for lt in base.layers]:
        raise ValueError("traces differ in shape: their layers' heads, queries or keys")
    out = torch.zeros(len(shapes), shapes[0][0], dtype=torch.float64)  # [layer, head]
    for i, (a, b) in enumerate(zip(new.layers, base.layers, strict=True)):
        step = max(1, BLOCK_CELLS // a.n_k)
        for h in range(a.n_heads):
            for r0 in range(0, a.n_q, step):
                rows = slice(r0, min(a.n_q, r0 + step))
                diff = a.block("weights", h, rows) - b.block("weights", h, rows)  # [r, k]
                out[i, h] += float(diff.abs().sum(dtype=torch.float64))
    return (0.5 * out / shapes[0][1]).float()


def heads_linking(
    trace: Trace, query: int, key: int, top: int = 10, field: str = "weights"
) -> list[tuple[int, int, float]]:
    """The heads that put the most weight (or `field` "moved") from `query` on `key`, as (layer,
    head, value), best first: which head links "it" to "animal"?"""
    n_q, n_k = trace.layers[0].n_q, trace.layers[0].n_k
    if not (0 <= query < n_q and 0 <= key < n_k):
        raise ValueError(f"query={query}, key={key} must be positions below {n_q} and {n_k}")
    # one cell of each head (a lean trace recomputes just it, never every n x n map)
    w = torch.stack([
        torch.stack([lt.block(field, h, [query], [key])[0, 0] for h in range(lt.n_heads)])
        for lt in trace.layers
    ])  # [layer, head]  # fmt: skip
    order = torch.argsort(w.flatten(), descending=True)[:top]
    n_heads = w.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads, float(w.flatten()[i])) for i in order]


def _positions(trace: Trace) -> dict[str, list[int]]:
    """The key positions of each group the comparison reports: special tokens ([CLS], [SEP], a
    decoder's [BOS] or <|endoftext|>; never padding or [UNK]), punctuation (as the head atlas
    counts it), and both."""
    from attnviz.measures.pieces import is_marker
    from attnviz.measures.roles import is_punctuation

    n_k = trace.layers[0].n_k
    keys = trace.key_tokens or trace.tokens
    special = {p for name, ps in trace.special.items() if name != "[PAD]" for p in ps if p < n_k}
    special = sorted(special | {j for j, tok in enumerate(keys[:n_k]) if is_marker(tok)})
    punct = [j for j, tok in enumerate(keys[:n_k]) if is_punctuation(tok) and j not in special]
    return {"special": special, "punct": punct, "both": sorted(special + punct)}


def _shares(
    layer: LayerTrace, cols: dict[str, list[int]], specials: tuple[int, ...] = ()
) -> dict[str, torch.Tensor]:
    """Per head, the sums over every query row of weights and moved: in total, and on each
    group's keys. A band of rows at a time (a lean layer: never n x n for all heads; its column
    sums come from the overview's pass over bands, `specials` naming that pass)."""
    from attnviz.engine.bands import THUMB, summarize
    from attnviz.engine.lean import BLOCK_CELLS

    # the per-key norms when the layer has them (moved = weights x norms), else its own moved
    # (a trace grouped into words); neither: moved_block says why
    f = layer.f_norm if layer.has("f_norm") else None  # [head, k]
    n_heads, n_q, n_k = layer.n_heads, layer.n_q, layer.n_k
    sums = {
        f"{field}_{name}": torch.zeros(n_heads, dtype=torch.float64)
        for field in ("weights", "moved")
        for name in ("total", *cols)
    }
    if layer.in_bands:  # every head's column sums from the overview's pass (memoized on the layer)
        col = summarize(layer, (THUMB, THUMB), specials).col_sums  # [head, k]
        moved = col * layer.norms().double()  # [head, k] Σ_i moved[i, j]
        for field, x in (("weights", col), ("moved", moved)):
            sums[f"{field}_total"] += x.sum(-1)
            for name, keys in cols.items():
                sums[f"{field}_{name}"] += x[:, keys].sum(-1)
        return sums
    step = max(1, BLOCK_CELLS // max(1, n_k))
    for h in range(n_heads):
        for r0 in range(0, n_q, step):
            rows = slice(r0, min(n_q, r0 + step))
            col_sums = layer.block("weights", h, rows).sum(0, dtype=torch.float64)  # [k] Σ_i w
            if f is None:
                moved = layer.block("moved", h, rows).sum(0, dtype=torch.float64)  # [k] Σ_i moved
            else:
                moved = col_sums * f[h].double()  # [k] Σ_i moved[i, j] over the band
            sums["weights_total"][h] += col_sums.sum()
            sums["moved_total"][h] += moved.sum()
            for name, keys in cols.items():
                sums[f"weights_{name}"][h] += col_sums[keys].sum()
                sums[f"moved_{name}"][h] += moved[keys].sum()
    return sums


def special_share(trace: Trace) -> pd.DataFrame:
    """The Kobayashi comparison: for each head, the share of its attention and the share of what
    it moves that go to special tokens and punctuation.

    share of x on keys S = Σ_i Σ_{j∈S} x[i, j] / Σ_i Σ_j x[i, j], over every query row, with x the
    weights (each row sums to 1, so this is the mean weight on S) or `moved`. Columns: layer,
    head, weights_special, moved_special ([CLS], [SEP], [BOS], <s>...; never padding or [UNK]),
    weights_punct, moved_punct (tokens of punctuation alone: "." "," "。"), weights_both,
    moved_both (the two together). A head that moves nothing (silenced) has NaN moved shares.
    Value-weighted attention: attnviz.engine.writes. A lean trace is summed a band at a time."""
    import pandas as pd

    from attnviz.engine.bands import specials_of

    cols = _positions(trace)
    rows = []
    for i, layer in enumerate(trace.layers):
        sums = _shares(layer, cols, specials_of(trace))
        for h in range(layer.n_heads):
            row = {"layer": i, "head": h}
            for name in cols:
                for field in ("weights", "moved"):
                    total = float(sums[f"{field}_total"][h])
                    part = float(sums[f"{field}_{name}"][h])
                    row[f"{field}_{name}"] = part / total if total > 0 else float("nan")
            rows.append(row)
    columns = ["layer", "head"] + [f"{f}_{n}" for n in cols for f in ("weights", "moved")]
    return pd.DataFrame(rows, columns=columns)
