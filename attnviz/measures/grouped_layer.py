"""GroupedLayer: a layer over groups of pieces (words, whole characters), read through
LayerTrace's interface (attnviz.measures.words makes them; the rule is in its docstring).

A short trace's layer is grouped at once and stored. A long trace's layer (one read in bands)
stays so: a grouped block is made from the pieces' block, a band of rows at a time, so nothing
n x n is held for all heads; `pooled` gives the overview's pooled maps that way, in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnviz.engine.bands import BAND_CELLS, MOVED, band, bins, indicator
from attnviz.engine.lean import BLOCK_CELLS, positions_of
from attnviz.engine.trace import LayerTrace
from attnviz.measures.pieces import Groups, reduce

FIELDS = ("weights", "moved", "mask")


def no_scores(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    raise ValueError(
        "a trace grouped into words keeps weights, moved and the mask only: scores, q, k, v and z "
        "do not add up over pieces. Read them on the trace of pieces"
    )


@dataclass(repr=False)
class GroupedLayer(LayerTrace):
    """A LayerTrace over groups of pieces: weights, moved and the mask (scores, q, k, v and z do
    not add up over pieces). `base` is the layer of pieces when its fields are grouped on access
    (a layer read in bands), else None (grouped at once and stored)."""

    base: LayerTrace | None = None
    row_groups: Groups | None = None
    col_groups: Groups | None = None

    @property
    def holds_maps(self) -> bool:
        return self.base is None

    @property
    def device(self) -> torch.device:
        return super().device if self.base is None else self.base.device  # the pieces' pass

    @property
    def one_to_one(self) -> bool:
        """Grouped on access with every group one piece (a Chinese text in Gemma's pieces): the
        base's numbers are the grouped ones, so it is read as it is and the pieces' pass over
        bands, warmed when the trace was made, serves the words too (bench/words.py)."""
        base = self.base
        return base is not None and (len(self.row_groups), len(self.col_groups)) == (
            base.n_q, base.n_k)  # fmt: skip

    def has(self, name: str) -> bool:
        if name == "moved":
            return self.raw("moved") is not no_moved
        return name in FIELDS

    def head_map(self, name: str, h: int, side: int) -> torch.Tensor:
        if self.base is None:
            return self.head(name, h)
        if self.one_to_one:
            return self.base.head_map(name, h, side)
        return self.pooled(side, side, name)[h]  # pooled in bands, every head at once

    def pass_due(self, side: Any, specials: tuple[int, ...], maps: bool = False) -> bool:
        # only the overview's maps wait (one pass pools both fields); statistics go by blocks
        if self.one_to_one and maps and side != MOVED:
            return self.base.pass_due(side, specials, maps)
        return self.base is not None and maps and side != MOVED and not self.is_pooled(*side)

    def make_pass(self, side: Any, specials: tuple[int, ...]) -> None:
        if self.base is not None and side != MOVED:
            self.pooled(*side, specials=specials)

    def compacted(self, half: tuple[str, ...] = ()) -> LayerTrace:
        return self  # nothing of it is recomputed from q and k

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
        if self.one_to_one:
            return self.base.block(name, h, rows, cols)
        g_rows = positions_of(rows, len(self.row_groups))
        g_cols = positions_of(cols, len(self.col_groups))
        return _reduce(self, name, h, g_rows, g_cols)

    def __repr__(self) -> str:  # the dataclass's would read every field, scores included
        how = "stored" if self.base is None else "grouped on access"
        return (f"GroupedLayer({self.n_heads} heads, {len(self.row_groups)} x "
                f"{len(self.col_groups)} groups, {how})")  # fmt: skip

    def nbytes(self) -> int:
        """Its own tensors and, when grouped on access, the layer of pieces it keeps alive."""
        return super().nbytes() + (0 if self.base is None else self.base.nbytes())

    def pooled(
        self, th: int, tw: int, name: str = "weights", specials: tuple[int, ...] = ()
    ) -> torch.Tensor:
        """Every head's grouped `name` ("weights" or "moved") average-pooled to at most th x tw
        (adaptive_avg_pool2d's bins); over a lean trace, a band of rows of every head at a time,
        as the overview pools a lean trace of pieces. [head, <=th, <=tw] CPU float32"""
        if self.one_to_one:
            return self.base.pooled(th, tw, name, specials)  # the pieces' pass: one a layer
        n_q, n_k = len(self.row_groups), len(self.col_groups)
        th, tw = min(th, n_q), min(tw, n_k)
        made = self.__dict__.setdefault("_pooled", {})  # a head's picture asks for every head's
        if (th, tw, name) not in made:
            if self.base is None:  # stored: pooled at once
                field = getattr(self, name)  # [head, q, k]
                made[(th, tw, name)] = torch.nn.functional.adaptive_avg_pool2d(field, (th, tw))
            else:  # one pass over the pieces gives both fields
                if name == "moved":
                    self.base.norms()  # says why there is no moved
                for field, pooled in self._pool(th, tw).items():
                    made[(th, tw, field)] = pooled
        return made[(th, tw, name)]

    def is_pooled(self, th: int, tw: int) -> bool:
        """Whether the weights' pooled map at this size is made already (pooled, memoized)."""
        th, tw = min(th, len(self.row_groups)), min(tw, len(self.col_groups))
        return (th, tw, "weights") in self.__dict__.get("_pooled", {})

    def _pool(self, th: int, tw: int) -> dict[str, torch.Tensor]:
        """A lean base's grouped weights and (where it has per-key norms) moved, pooled in one
        pass over bands of pieces: moved's pooled rows are the weights' times the keys' norms
        (the norms weigh columns, the row pooling weighs rows). {field: [head, th, tw]}"""
        n_q, n_k = len(self.row_groups), len(self.col_groups)
        row_s, row_e = bins(n_q, th)
        col_s, col_e = bins(n_k, tw)
        # pooling after grouping is one product per side over pieces: piece j of key group J
        # counts in J's column bin; piece i of row group I counts 1/|I| in I's row bin. Bands
        # of pieces, not of groups: a word of thousands of pieces (a URL, a run without spaces)
        # never makes a band of thousands of rows.
        per_key = indicator(col_s, col_e, 0, n_k).T[self.col_groups.of_piece()]  # [k, tw]
        f = self.base.stored("f_norm")  # [head, k] or None: no moved
        f = None if f is None else f.to("cpu", torch.float32)
        of_piece = self.row_groups.of_piece()  # [pieces] each piece's group
        weight = 1.0 / self.row_groups.sizes(of_piece).float()  # [pieces] 1/|I|
        out = torch.zeros(self.n_heads, th, tw)
        moved = None if f is None else torch.zeros(self.n_heads, th, tw)
        n_pieces = len(of_piece)
        step = max(16, BAND_CELLS // max(1, self.col_groups.n * self.n_heads))  # as bands.py's
        for p0 in range(0, n_pieces, step):
            p1 = min(n_pieces, p0 + step)
            w, _, c0, c1 = band(self.base, p0, p1)  # [head, pieces, c] every head at once
            w = w.float().cpu()
            groups = of_piece[p0:p1]  # [pieces], sorted
            touch = ((row_s <= groups[-1]) & (row_e > groups[0])).nonzero().squeeze(-1)
            b0, b1 = int(touch[0]), int(touch[-1]) + 1  # output rows it hits
            inside = (groups >= row_s[b0:b1, None]) & (groups < row_e[b0:b1, None])  # [out, p]
            per_row = inside.float() * weight[p0:p1]  # [out, pieces]
            rows = per_row @ w  # [head, out, c]: few rows
            out[:, b0:b1] += rows @ per_key[c0:c1]  # [head, out, tw]
            if moved is not None:
                moved[:, b0:b1] += (rows * f[:, None, c0:c1]) @ per_key[c0:c1]  # [head, out, tw]
        area = ((row_e - row_s).unsqueeze(1) * (col_e - col_s).unsqueeze(0)).float()
        both = {"weights": out / area}
        return both if moved is None else both | {"moved": moved / area}


def _band_rows(groups: Groups, n_k: int) -> int:
    """Groups of rows per band so that a band's pieces x keys stay near BLOCK_CELLS."""
    longest = int(groups._sizes.max()) if len(groups) else 1
    return max(1, BLOCK_CELLS // max(1, n_k * longest))


def _whole_rows(layer: GroupedLayer, name: str, h: int, r0: int, r1: int) -> torch.Tensor:
    """Grouped rows r0..r1-1 over every column group, from the base's block of only the keys
    its rule lets those pieces see (a causal band: the keys up to its last piece). [r, k']"""
    rg, cg = layer.row_groups, layer.col_groups
    p0, p1 = rg.spans[r0][0], rg.spans[r1 - 1][1]
    lo, hi = layer.base.key_span(p0, p1)  # a causal band: the keys up to its last piece
    out = torch.zeros(r1 - r0, len(cg))  # a mask's counts: > 0 where it may attend
    if hi > lo:
        g0, g1 = cg.group_at(lo), cg.group_at(hi - 1) + 1
        c0, c1 = cg.spans[g0][0], cg.spans[g1 - 1][1]
        block = layer.base.block(name, h, slice(p0, p1), slice(c0, c1))  # [pieces, pieces]
        out[:, g0:g1] = reduce(block, rg, torch.arange(r0, r1), cg, torch.arange(g0, g1))
    return out


def _bands(layer: GroupedLayer, name: str, h: int):
    """(r0, r1, grouped rows r0..r1-1 over every column group), band after band."""
    n_q = len(layer.row_groups)
    step = _band_rows(layer.row_groups, layer.col_groups.n)
    for r0 in range(0, n_q, step):
        r1 = min(n_q, r0 + step)
        yield r0, r1, _whole_rows(layer, name, h, r0, r1)


def _every_column(layer: GroupedLayer, name: str, h: int, g_rows: torch.Tensor) -> torch.Tensor:
    """Whole grouped rows, a band of them at a time over the span the selected rows cover."""
    out = torch.zeros(len(g_rows), len(layer.col_groups))
    order = torch.sort(g_rows)
    rows = order.values.tolist()
    step = _band_rows(layer.row_groups, layer.col_groups.n)
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j] < rows[i] + step:
            j += 1
        w = _whole_rows(layer, name, h, rows[i], rows[j - 1] + 1)  # [band, k']
        out[order.indices[i:j]] = w[torch.tensor(rows[i:j]) - rows[i]]
        i = j
    return out


def _reduce(
    layer: GroupedLayer, name: str, h: int, g_rows: torch.Tensor, g_cols: torch.Tensor
) -> torch.Tensor:
    """The grouped block of the base layer's pieces, a band of group rows at a time."""
    rg, cg = layer.row_groups, layer.col_groups
    if len(g_cols) == len(cg) and torch.equal(g_cols, torch.arange(len(cg))):
        out = _every_column(layer, name, h, g_rows)
        return out > 0 if name == "mask" else out
    cols = torch.sort(g_cols)
    col_pieces = cg.pieces(cols.values)
    out = torch.zeros(len(g_rows), len(g_cols))
    step = _band_rows(rg, len(col_pieces))
    for r0 in range(0, len(g_rows), step):
        rows = torch.sort(g_rows[r0 : r0 + step])
        block = layer.base.block(name, h, rg.pieces(rows.values), col_pieces)  # [pieces, pieces]
        got = reduce(block, rg, rows.values, cg, cols.values)  # [band, cols], both sorted
        reordered = torch.empty_like(got)
        reordered[rows.indices] = got
        out[r0 : r0 + len(rows.indices), cols.indices] = reordered
    return out > 0 if name == "mask" else out  # a mask: any piece may attend any piece


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


def no_moved(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    raise ValueError("the trace of pieces has no per-key norms, so neither has its grouping")
