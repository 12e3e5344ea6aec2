"""One pass over a lean layer's weights, a band of query rows at a time for every head: the
overview's pooled map and the head statistics' row sums come from the same recomputed band.

A band's weights are exp(q·kᵀ·scale − lse) (attnviz.engine.lean). Pooling is two small matmuls
with bin-indicator matrices (the band's rows into the output rows they touch, then the keys into
column bins), so its cost does not grow with Python loops per output row. The entropy needs no
log: log w = q·k·scale − lse is the exponent itself, so H = −Σ w·(q·k·scale − lse). The mask is
applied only to the columns where the rule can mask something (a causal band: its last columns).
The result is memoized on the layer (a trace is read-only once made).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from attnviz.engine.lean import MaskRule, key_range, safe_cols

# Cells of one band (every head): 1M float32 = 4 MiB. At 4,096 tokens one pass took 2.7 / 2.0 /
# 1.9 / 2.2 s with 2^19 / 2^20 / 2^21 / 2^22 cells (best of 3, load average 4): smaller bands
# spend more in Python per band than they win in cache; SmolLM2's 9 heads at 512 tokens pass
# 2x quicker with 2^20 than 2^21 on busy cores (bench/words.py), Gemma's 4 at 1,566 alike.
BAND_CELLS = 2**20
LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634  # exp(x) = 2^(x·log2 e); exp2 is a third faster than exp on a CPU

# Pixels a side of each head's thumbnail in the overview of a long input (attnviz.views.panels):
# the statistics ask for this size too, so one pass gives both.
THUMB = 96

MOVED = "moved"  # a summary's side that asks for the statistics of moved (summarize_moved)
STAT_SUMS = ("entropy", "entropy_rel", "max_weight", "distance", "self", "prev", "first", "special")


@dataclass(frozen=True)
class LayerSummary:
    """What one pass over a lean layer gives. `pooled`: every head's weights average-pooled to
    adaptive_avg_pool2d's bins, [head, th, tw] CPU float32 (None if not asked); `sums[name]`:
    per-head sums over query rows of each statistic's row value, [head] float64; `rows[name]`:
    how many rows each statistic averages over ("live": rows with an allowed key, "wide": more
    than one, "prev": live rows after the first); `pooled_moved`: the same pooling of `moved`
    (weights x the per-key norms, engine/writes.py; None without norms or side); `col_sums`:
    each head's weights summed over every query row, [head, n_k] float64 (moved's column sums
    are these times the norms: the Kobayashi shares, measures/stats.special_share)."""

    pooled: torch.Tensor | None
    sums: dict[str, torch.Tensor]
    rows: dict[str, int]
    pooled_moved: torch.Tensor | None = None
    col_sums: torch.Tensor | None = None


def specials_of(trace) -> tuple[int, ...]:
    """The key positions of a trace's special tokens, sorted (head_stats' "special" column)."""
    n_k = trace.layers[0].n_k
    return tuple(sorted({p for ps in trace.special.values() for p in ps if p < n_k}))


def allowed_counts(rule: MaskRule, rows: torch.Tensor) -> torch.Tensor:
    """How many keys each query row may attend, from the rule alone (no [rows, keys] mask). [r]"""
    qi = rows + rule.q_offset  # [r]
    hi = (qi + 1).clamp(max=rule.n_k) if rule.causal else torch.full_like(rows, rule.n_k)
    lo = (qi - rule.window + 1).clamp(min=0) if rule.window is not None else torch.zeros_like(rows)
    hi = torch.maximum(hi, lo)
    if rule.keys is None:
        return hi - lo
    keys = rule.keys if rule.keys.dim() == 1 else rule.keys[0]  # [n_k]
    prefix = torch.nn.functional.pad(keys.cpu().long().cumsum(0), (1, 0))  # [n_k + 1]
    return prefix[hi] - prefix[lo]


def bins(n: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """adaptive_avg_pool's bins of n positions into t: starts and ends (ends exclusive). [t]"""
    i = torch.arange(t)
    return (i * n) // t, -((-(i + 1) * n) // t)


def indicator(starts: torch.Tensor, ends: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """1 where position lo..hi-1 lies in bin b: [bins, hi - lo] float32."""
    pos = torch.arange(lo, hi)
    return ((pos >= starts.unsqueeze(1)) & (pos < ends.unsqueeze(1))).float()


def band(layer, r0: int, r1: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(weights, exponent in bits) of every head for query rows r0..r1-1 on the keys they may see
    c0..c1-1: weights = 2^exponent, [head, r, c] float32 each, on the trace's device; masked
    weights are exactly 0."""
    q, k = layer.stored("q"), layer.stored("k")
    rule = layer.rule
    c0, c1 = key_range(rule, r0, r1)
    n_heads, n_kv, r = q.shape[0], k.shape[0], r1 - r0
    # the query heads of one K/V head side by side: one matmul per K/V head, k never expanded
    qb = q[:, r0:r1].float().reshape(n_kv, -1, q.shape[-1])  # [kv, group * r, d]
    kb = k[:, c0:c1].float()  # [kv, c, d]
    lse = layer.stored("lse")[:, r0:r1].float().to(q.device).reshape(n_kv, -1, 1)  # [kv, g*r, 1]
    expo = torch.baddbmm(-LOG2E * lse, qb, kb.transpose(1, 2), alpha=layer.scale * LOG2E)
    expo = expo.view(n_heads, r, c1 - c0)  # [head, r, c]: log2 of the weights
    w = expo.exp2()  # [head, r, c]
    a, b = safe_cols(rule, r0, r1, c0, c1)
    rows = torch.arange(r0, r1)
    for lo, hi in ((c0, a), (b, c1)):  # the columns the rule may mask
        if hi > lo:
            ok = rule.allowed(rows, torch.arange(lo, hi)).to(q.device)  # [r, part]
            w[:, :, lo - c0 : hi - c0].masked_fill_(~ok, 0.0)
    return w, expo, c0, c1


_state_lock = threading.Lock()  # makes a layer's _Memo once


class _Memo:
    """A lean layer's summaries by (side, specials), and the passes over it running now (a
    thread that needs one of those waits for it). Kept on the layer. `moved`: the statistics of
    moved's rows by specials (summarize_moved)."""

    def __init__(self) -> None:
        self.made: dict[tuple, LayerSummary] = {}
        self.moved: dict[tuple, LayerSummary] = {}
        self.running: set[tuple] = set()  # (table, key) of each pass under way
        self.cv = threading.Condition()


def _memo(layer) -> _Memo:
    memo = layer.__dict__.get("_summaries")
    if memo is None:
        with _state_lock:
            memo = layer.__dict__.setdefault("_summaries", _Memo())
    return memo


def made(layer, side: tuple[int, int] | None, specials: tuple[int, ...]) -> bool:
    """Whether this layer's summary for (side, specials) is made already (side MOVED: the
    statistics of moved)."""
    memo = layer.__dict__.get("_summaries")
    if side == MOVED:
        return memo is not None and specials in memo.moved
    return memo is not None and (side, specials) in memo.made


def summarize(
    layer, side: tuple[int, int] | None, specials: tuple[int, ...] | None = None
) -> LayerSummary:
    """The pooled map (to at most side = (th, tw), or none) and the statistics' sums of a lean
    layer, in one pass over bands of rows; memoized per (side, specials) on the layer. Specials
    None: any summary already made will do (the caller reads no "special" sum). A thread that
    asks while another passes over the same layer waits for it (its summary may be the one).
    side MOVED: summarize_moved (the statistics of moved, no pooled map)."""
    if side == MOVED:
        return summarize_moved(layer, specials or ())
    memo = _memo(layer)
    key = (side, () if specials is None else specials)
    return _once(memo, memo.made, key, lambda: _summarize(layer, side, key[1]), specials is None)


def summarize_moved(layer, specials: tuple[int, ...]) -> LayerSummary:
    """The statistics' sums of a lean layer's `moved`, each row scaled to sum to 1 (where what
    reaches a query comes from; engine.stats.head_stats(field="moved")), in one pass over bands of
    rows as for the weights (no pooled map); memoized on the layer."""
    if not layer.has("f_norm"):
        raise ValueError("this layer has no per-key norms (LayerTrace.f_norm): no moved")
    memo = _memo(layer)
    return _once(memo, memo.moved, specials, lambda: _summarize(layer, None, specials, moved=True))


def _once(memo: _Memo, table: dict, key: tuple, make, any_made: bool = False) -> LayerSummary:
    """table[key], made once: a thread that asks while another makes it (or, with `any_made`,
    while another makes any summary of the table: any will do) waits for that pass; one made
    already comes back at once, whatever else passes over the layer (the statistics of moved's
    warm-up never holds up the overview)."""
    which = id(table)
    with memo.cv:
        while True:
            if any_made and table:
                return next(iter(table.values()))
            if key in table:
                return table[key]
            others = [k for t, k in memo.running if t == which]
            if key not in others and not (any_made and others):
                break
            memo.cv.wait()
        memo.running.add((which, key))
    try:
        summary = table[key] = make()
    finally:
        with memo.cv:
            memo.running.discard((which, key))
            memo.cv.notify_all()
    return summary


def summaries(
    layers, side: tuple[int, int] | None, specials: tuple[int, ...]
) -> list[LayerSummary]:
    """summarize() of every layer, one after another in this thread (a server makes them a layer
    per core beforehand: attnviz.serve.bandpool), each memoized on its layer."""
    return [summarize(layer, side, specials) for layer in layers]


def _summarize(
    layer, side: tuple[int, int] | None, specials: tuple[int, ...], moved: bool = False
) -> LayerSummary:
    """One pass over bands: the weights' summary, or with `moved` the statistics of moved's rows
    as shares (no pooled map, no column sums: the weights' pass gives those of moved)."""
    rule = layer.rule
    n_q, n_k, n_heads = layer.n_q, layer.n_k, layer.n_heads
    dev = layer.stored("q").device
    sums = {name: torch.zeros(n_heads, dtype=torch.float64, device=dev) for name in STAT_SUMS}
    pooled = pooled_moved = None
    norms = layer.stored("f_norm")  # [head, k] or None: moved = weights x norms
    norms = None if norms is None else norms.to(dev, torch.float32)
    moved_sums = None
    if moved:
        moved_sums = {name: torch.zeros_like(sums[name]) for name in STAT_SUMS}
        # per key: f and ln f (0 where f = 0: that key sends nothing)
        ln_f = torch.where(norms > 0, norms.clamp_min(1e-30).log(), 0.0)  # [head, k]
        per_key = torch.stack([norms, ln_f])  # [2, head, k]
    col_sums = torch.zeros(n_heads, n_k, dtype=torch.float64, device=dev)  # [head, k]
    if side is not None and not moved:
        th, tw = min(side[0], n_q), min(side[1], n_k)
        row_s, row_e = bins(n_q, th)
        col_s, col_e = bins(n_k, tw)
        pooled = torch.zeros(n_heads, th, tw, device=dev)
        pooled_moved = None if norms is None else torch.zeros(n_heads, th, tw, device=dev)
        cmat = indicator(col_s, col_e, 0, n_k).T.contiguous().to(dev)  # [k, tw]
    counts = allowed_counts(rule, torch.arange(n_q))  # [q]
    live, wide = counts > 0, counts > 1
    prev_ok = live & (torch.arange(n_q) > 0)
    step = max(16, BAND_CELLS // max(1, n_heads * n_k))
    for r0 in range(0, n_q, step):
        r1 = min(n_q, r0 + step)
        w, expo, c0, c1 = band(layer, r0, r1)  # [head, r, c] each
        rows = torch.arange(r0, r1)
        wlog = expo.mul_(w)  # [head, r, c] w·log2 w (masked cells: w = 0)
        if moved_sums is not None:
            at_keys = per_key[:, :, c0:c1]  # [2, head, c]
            _add_moved_stats(moved_sums, w, wlog, at_keys, rows, c0, counts[r0:r1], specials)
            continue
        if pooled is not None:
            touch = ((row_s < r1) & (row_e > r0)).nonzero().squeeze(-1)  # output rows hit
            b0, b1 = int(touch[0]), int(touch[-1]) + 1
            rmat = indicator(row_s[b0:b1], row_e[b0:b1], r0, r1).to(dev)  # [out, r]
            rows_pooled = torch.matmul(rmat, w)  # [head, out, c]: few output rows a band
            pooled[:, b0:b1] += rows_pooled @ cmat[c0:c1]  # [head, out, tw]
            if pooled_moved is not None:  # the keys' norms weigh the few pooled rows, not the band
                pooled_moved[:, b0:b1] += (rows_pooled * norms[:, None, c0:c1]) @ cmat[c0:c1]
        col_sums[:, c0:c1] += w.sum(1)  # [head, c] (a float32 sum of one band's rows)
        _add_stats(sums, w, wlog, rows, c0, c1, counts[r0:r1], specials)
    if pooled is not None:
        area = ((row_e - row_s).unsqueeze(1) * (col_e - col_s).unsqueeze(0)).float()  # [th, tw]
        pooled = (pooled / area.to(dev)).cpu()
        if pooled_moved is not None:
            pooled_moved = (pooled_moved / area.to(dev)).cpu()
    rows = {"live": int(live.sum()), "wide": int(wide.sum()), "prev": int(prev_ok.sum())}
    if moved_sums is not None:
        return LayerSummary(None, {k: v.cpu() for k, v in moved_sums.items()}, rows)
    sums = {k: v.cpu() for k, v in sums.items()}
    return LayerSummary(pooled, sums, rows, pooled_moved, col_sums.cpu())


def _add_moved_stats(sums, w, wlog, per_key, rows, c0: int, n_allowed, specials) -> None:
    """Add a band's row values of every statistic of moved's rows as shares, m = w·f / T with
    T = Σ_j w·f, to `sums`, without dividing the band: H(m) = ln T − (Σ w·ln w·f + Σ w·f·ln f)
    / T, and every other statistic is a sum of w·f over T. A row that moves nothing (T = 0) is
    all 0. wlog: w·log2 w; per_key: [2, head, c] f and ln f of the band's keys. (A product and
    a sum: a batched matrix-vector product against each head's f took 1.4x as long, 2.8 ms
    against 1.9 ms for a band of 8 heads x 64 rows x 4,096 keys on one CPU thread.)"""
    dev = w.device
    n_allowed = n_allowed.to(dev)
    f, ln_f = per_key[0], per_key[1]  # [head, c] each
    c1 = c0 + w.shape[-1]
    wf = w * f.unsqueeze(1)  # [head, r, c] moved
    total = wf.sum(-1)  # [head, r]
    inv = torch.where(total > 0, 1.0 / total.clamp_min(1e-30), 0.0)  # [head, r]
    plogp = (wlog * f.unsqueeze(1)).sum(-1).mul_(LN2) + (wf * ln_f.unsqueeze(1)).sum(-1)
    entropy = torch.where(total > 0, total.clamp_min(1e-30).log() - plogp * inv, 0.0)
    entropy = entropy.masked_fill_(~(n_allowed > 0), 0.0)  # a row with no allowed key: 0
    sums["entropy"] += entropy.double().sum(-1)
    max_h = torch.log(n_allowed.clamp_min(2).float())  # [r]
    sums["entropy_rel"] += (entropy / max_h * (n_allowed > 1)).double().sum(-1)
    sums["max_weight"] += (wf.amax(-1) * inv).double().sum(-1)
    r_dev = rows.to(dev)
    sums["distance"] += (_distance(wf, r_dev, c0, c1) * inv).double().sum(-1)
    inside = (r_dev >= c0) & (r_dev < c1)
    sums["self"] += (_at(wf, r_dev - c0, inside) * inv).double().sum(-1)
    before = (r_dev > 0) & (r_dev - 1 >= c0) & (r_dev - 1 < c1)
    sums["prev"] += (_at(wf, r_dev - 1 - c0, before) * inv).double().sum(-1)
    if c0 == 0:
        sums["first"] += (wf[:, :, 0] * inv).double().sum(-1)
    cols = [p - c0 for p in specials if c0 <= p < c1]
    if cols:
        sums["special"] += (wf[:, :, cols].sum(-1) * inv).double().sum(-1)


def _add_stats(sums, w, wlog, rows, c0: int, c1: int, n_allowed, specials) -> None:
    """Add a band's row values of every statistic (attnviz.measures.stats.head_stats) to `sums`;
    wlog: w·log2 w (the exponent times w)."""
    dev = w.device
    n_allowed = n_allowed.to(dev)
    live, wide = n_allowed > 0, n_allowed > 1  # [r]
    # H = −Σ w·ln w, and ln w = exponent·ln 2 wherever w > 0 (masked cells have w = 0)
    entropy = wlog.sum(-1).mul_(-LN2)  # [head, r]
    entropy = entropy.masked_fill_(~live, 0.0)  # a row with no allowed key: 0
    sums["entropy"] += entropy.double().sum(-1)
    max_h = torch.log(n_allowed.clamp_min(2).float())  # [r]
    sums["entropy_rel"] += (entropy / max_h * wide).double().sum(-1)
    sums["max_weight"] += w.amax(-1).double().sum(-1)
    sums["distance"] += _distance(w, rows.to(dev), c0, c1).double().sum(-1)
    r_dev = rows.to(dev)
    inside = (r_dev >= c0) & (r_dev < c1)
    sums["self"] += _at(w, r_dev - c0, inside).double().sum(-1)
    before = (r_dev > 0) & (r_dev - 1 >= c0) & (r_dev - 1 < c1)
    sums["prev"] += _at(w, r_dev - 1 - c0, before).double().sum(-1)
    if c0 == 0:
        sums["first"] += w[:, :, 0].double().sum(-1)
    cols = [p - c0 for p in specials if c0 <= p < c1]
    if cols:
        sums["special"] += w[:, :, cols].double().sum((-1, -2))


def _distance(w: torch.Tensor, rows: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
    """Σ_j w[h, i, j]·|i − j| for each row i: i·Σw − Σ w·j over every key, plus 2·Σ w·(j − i)
    over the keys right of the band's first row (the only ones that can be after i). [head, r]"""
    dev = w.device
    pos = torch.arange(c0, c1, device=dev, dtype=torch.float32)  # [c]
    fi = rows.float()  # [r]
    dist = fi * w.sum(-1) - w @ pos  # [head, r]: i·Σ w − Σ w·j
    a = max(c0, int(rows[0]) + 1)  # keys that may lie after some row of the band
    if a < c1:
        after = (pos[a - c0 :].unsqueeze(0) - fi.unsqueeze(1)).clamp_min(0)  # [r, c']
        dist += 2 * torch.einsum("hrc,rc->hr", w[:, :, a - c0 :], after)
    return dist


def _at(w: torch.Tensor, cols: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """w[:, i, cols[i]] for each band row i where ok, else 0. [head, r]"""
    out = torch.zeros(w.shape[:2], device=w.device)
    idx = ok.nonzero().squeeze(-1)
    out[:, idx] = w[:, idx, cols[idx]]
    return out
