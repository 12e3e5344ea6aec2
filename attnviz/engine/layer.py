"""The layer family: LayerTrace (every field kept as given) and LeanLayer (a long input's: nothing
n x n stored, scores and weights recomputed exactly on access from q, k, the mask rule, the scale
and the per-row log-sum-exp, engine/lean.py; every head's pooled map and statistics from one pass
over bands of rows, engine/bands.py). A trace over words holds GroupedLayers
(attnviz.measures.grouped_layer). Readers import them from attnviz.engine.trace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from attnviz.engine.attention import expand_kv, kv_head
from attnviz.engine.bands import allowed_counts, band, made, summarize
from attnviz.engine.lean import MaskRule, key_range, lean_block, pooled_head

_MISSING = object()
NO_NORMS = (
    "this trace has no per-key norms ||W_O^h v_j|| (LayerTrace.f_norm), so `moved` is unknown: "
    "trace the text again with this version of attnviz (trace_text or trace_model); a trace "
    "made from attention weights alone has no values"
)


def moved_of(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    """A layer's `moved` field, recomputed on access: weights · ||W_O^h v_j^h|| for every head
    [head, q, k], or for one [q, k] (value-weighted attention, engine/writes.py)."""
    f = layer.norms()  # [head, k]
    if head is None:
        return layer.weights * f.unsqueeze(1)  # [head, q, k]
    return layer.head("weights", head) * f[head].unsqueeze(0)  # [q, k]


def to_view(t: torch.Tensor | None) -> torch.Tensor | None:
    """What a view reads: on the CPU, float32 (bool masks stay bool). A no-op when it already is."""
    if t is None:
        return None
    if t.dtype == torch.bool:
        return t if t.device.type == "cpu" else t.cpu()
    if t.device.type == "cpu" and t.dtype == torch.float32:
        return t
    return t.to("cpu", torch.float32)


class _Stored:
    """A LayerTrace tensor field stored as given (any device, any dtype, or a function
    f(layer, head=None) that recomputes every head or one) and read as a CPU float32 tensor,
    converted on each access: a trace may stay on the GPU, or in float16, and a view copies only
    the field it reads."""

    def __init__(self, default: Any = _MISSING) -> None:
        self.default = default

    @staticmethod
    def slot_of(name: str) -> str:
        """Where field `name` is kept in a layer's __dict__."""
        return f"_stored_{name}"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, self.slot_of(name)

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:  # dataclass asks the class for a default
            if self.default is _MISSING:
                raise AttributeError(self.name)
            return self.default
        return to_view(obj.stored(self.name))

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class LayerTrace:
    """One attention block. Query head h uses kv head h // (n_heads // n_kv_heads).

    | field   | shape                    | meaning                                              |
    |---------|--------------------------|------------------------------------------------------|
    | q       | [n_heads, n_q, d_head]   | queries per head                                     |
    | k, v    | [n_kv_heads, n_k, d_head]| keys and values, not expanded                        |
    | scores  | [n_heads, n_q, n_k]      | raw q·k, before any scale or mask                    |
    | scale   | float                    | factor applied to scores                             |
    | mask    | bool [n_q, n_k] or None  | True = may attend                                    |
    | weights | [n_heads, n_q, n_k]      | softmax(scores * scale, masked); rows sum to 1       |
    | z       | [n_heads, n_q, d_head]   | per-head output, weights @ v                         |
    | output  | [n_q, d_model]           | the block's output after W_O, before the residual    |
    | x       | [n_q, d_model] or None   | the input the queries were projected from            |
    | lse     | [n_heads, n_q] or None   | log-sum-exp of each row's masked logits (lean only)  |
    | f_norm  | [n_heads, n_k] or None   | ||W_O^h v_j||: what key j sends through head h       |
    | moved   | [n_heads, n_q, n_k]      | weights * f_norm (value-weighted, engine/writes.py)  |

    Reading a field gives a CPU float32 tensor. What is stored may live on another device or be
    float16 (`compact`), or be recomputed from the others on access: `stored(name)` returns it as
    stored, `head(name, h)` converts one head only, `block(name, h, rows, cols)` a block of it.

    A family behind this one interface: this class keeps every field as given; built with a
    MaskRule as `mask` it is a LeanLayer (below: nothing n x n stored, scores and
    weights recomputed exactly on access); a trace over words holds GroupedLayers
    (measures/grouped_layer.py). A reader asks what it needs (`has`, `holds_maps`, `in_bands`,
    `head_map`, `pooled`, ...), never which kind it holds.
    """

    q: torch.Tensor = _Stored()
    k: torch.Tensor = _Stored()
    v: torch.Tensor = _Stored()
    scores: torch.Tensor = _Stored()
    scale: float
    mask: torch.Tensor | None = _Stored()
    weights: torch.Tensor = _Stored()
    z: torch.Tensor = _Stored()
    output: torch.Tensor = _Stored()
    x: torch.Tensor | None = _Stored(default=None)
    lse: torch.Tensor | None = _Stored(default=None)
    f_norm: torch.Tensor | None = _Stored(default=None)
    moved: torch.Tensor = _Stored(default=moved_of)

    def __new__(cls, *args: Any, **kwargs: Any) -> LayerTrace:
        # the keyword construction every caller uses: a mask rule means the lean kind
        if cls is LayerTrace and isinstance(kwargs.get("mask"), MaskRule):
            cls = LeanLayer
        return super().__new__(cls)

    @property
    def holds_maps(self) -> bool:
        """Whether every head's whole weights are held, so reading all of them at once is cheap;
        False: a reader takes blocks, bands of rows or a pooled map (a long input)."""
        return True

    @property
    def in_bands(self) -> bool:
        """Whether the weights come a band of rows of every head at a time, recomputed from q, k,
        the mask rule and the log-sum-exp (engine/bands.py): one pass gives the pooled maps, the
        statistics' sums and the column sums, and whole maps are never read."""
        return False

    @property
    def n_q(self) -> int:
        return self.stored("q").shape[1]

    @property
    def n_k(self) -> int:
        return self.stored("k").shape[1]

    @property
    def n_heads(self) -> int:
        return self.stored("q").shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.stored("k").shape[0]

    @property
    def device(self) -> torch.device:
        """Where the layer's tensors live (a pass over its bands runs there)."""
        return self.stored("q").device

    def kv_head(self, h: int) -> int:
        """The K/V head query head h reads (GQA, as torch's enable_gqa)."""
        return kv_head(h, self.n_heads, self.n_kv_heads)

    def raw(self, name: str) -> Any:
        """Field `name` exactly as kept: a tensor, a function that recomputes it, or None (not
        kept). How a layer keeps a field is this class's business; readers call this."""
        return self.__dict__.get(_Stored.slot_of(name))

    def has(self, name: str) -> bool:
        """Whether field `name` can be read: `moved` needs the per-key norms (or moved itself,
        stored), `f_norm`, `x` and `lse` may be None."""
        raw = self.raw(name)
        if name == "moved":
            return self.has("f_norm") or not _recomputed(raw)
        return raw is not None

    def norms(self) -> torch.Tensor:
        """The per-key norms ||W_O^h v_j|| [head, n_k], CPU float32, or a ValueError that says
        why there are none (a trace made from attention weights alone)."""
        if not self.has("f_norm"):
            raise ValueError(NO_NORMS)
        return self.f_norm

    def _moved_on_access(self) -> bool:
        return self.raw("moved") is moved_of

    def _moved_block(
        self, h: int, rows: slice | torch.Tensor | None, cols: slice | torch.Tensor | None
    ) -> torch.Tensor:
        """Head h's moved on rows x cols: the weights' block (a lean layer recomputes only it)
        times the norms of those keys. [rows, cols] CPU float32"""
        f = self.norms()[h]  # [k]
        if cols is not None:
            f = f[cols] if isinstance(cols, slice) else f[torch.as_tensor(cols, dtype=torch.long)]
        return self.block("weights", h, rows, cols) * f.reshape(1, -1)  # [rows, cols]

    def block(
        self,
        name: str,
        h: int,
        rows: slice | torch.Tensor | None = None,
        cols: slice | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Head h's `scores`, `logits` (scores * scale, -inf where masked), `weights`, `moved` or
        `mask` on rows x cols (a slice, positions, or None for all), CPU float32 (mask: bool): a
        lean layer recomputes only that block. [rows, cols]"""
        if name == "moved" and self._moved_on_access():
            return self._moved_block(h, rows, cols)
        rows = slice(None) if rows is None else rows
        cols = slice(None) if cols is None else cols
        if name == "mask":
            mask = self.mask
            full = torch.ones(self.n_q, self.n_k, dtype=torch.bool) if mask is None else mask
            return full[rows][:, cols]
        if name == "logits":
            return self.head_logits(h)[rows][:, cols]
        if name not in ("scores", "weights", "moved"):
            raise ValueError(f"block name={name!r} must be scores, logits, weights, moved or mask")
        return self.head(name, h)[rows][:, cols]

    def _read(self, name: str, h: int | None = None) -> torch.Tensor | None:
        """Field `name` as stored, every head (h None) or head h; a field stored as a function
        is recomputed, for that head alone when h is given."""
        raw = self.__dict__[_Stored.slot_of(name)]  # a field never set is a KeyError, not None
        if _recomputed(raw):
            return raw(self) if h is None else raw(self, h)
        return raw if h is None else raw[h]

    def stored(self, name: str) -> torch.Tensor | None:
        """The tensor as stored (device and dtype untouched; recomputed if stored as a function)."""
        return self._read(name)

    def head(self, name: str, h: int) -> torch.Tensor:
        """One head of a per-head field, CPU float32: on a GPU trace only that head is copied, and
        a recomputed field (a compact trace's scores) computes only that head."""
        return to_view(self._read(name, h))

    def head_map(self, name: str, h: int, side: int) -> torch.Tensor:
        """Head h's `weights` or `moved` to draw: the whole [q, k] map where the layer holds it,
        else pooled to at most side x side (a band of rows at a time). CPU float32"""
        return self.head(name, h)

    def pooled(
        self, th: int, tw: int, name: str = "weights", specials: tuple[int, ...] = ()
    ) -> torch.Tensor:
        """Every head's `name` ("weights" or "moved") average-pooled to at most th x tw
        (adaptive_avg_pool2d's bins), computed where the layer lives. `specials`: the trace's
        special keys, naming the pass over bands that gives it (engine/bands.py). [head, <=th,
        <=tw] CPU float32"""
        w = self.stored("weights") if name == "weights" else self.moved  # [head, q, k]
        n_q, n_k = w.shape[-2:]
        if n_q > th or n_k > tw:
            w = torch.nn.functional.adaptive_avg_pool2d(w.float(), (min(th, n_q), min(tw, n_k)))
        return to_view(w)

    def weight_bands(
        self, cells: int
    ) -> Iterator[tuple[int, int, int, torch.Tensor, torch.Tensor | None]]:
        """(r0, r1, c0, w, log2 w): every head's weights w [head, r1 - r0, c] of query rows
        r0..r1-1 on keys c0..c0+c-1, where the layer lives; masked weights are 0. Held weights
        come as one band with None; a layer in bands, bands of about `cells` cells (every head)
        with the exponent each was made from."""
        yield 0, self.n_q, 0, self.stored("weights").float(), None

    def pass_due(self, side: Any, specials: tuple[int, ...], maps: bool = False) -> bool:
        """Whether a view of every head at `side` (engine/bands.MOVED: the statistics of moved;
        `maps`: the overview's pooled maps) would wait for a pass over this layer's bands not
        made yet. A layer that holds its maps: never."""
        return False

    def make_pass(self, side: Any, specials: tuple[int, ...]) -> None:
        """Make that pass now (memoized on the layer); nothing for a layer that holds its maps."""

    def _masked(self, logits: torch.Tensor) -> torch.Tensor:
        mask = self.mask  # [q, k], broadcasts over heads (a lean layer's rule, materialised)
        return logits if mask is None else logits.masked_fill(~mask, float("-inf"))

    def head_logits(self, h: int) -> torch.Tensor:
        """What softmax sees for one head: scores * scale with -inf where masked. [n_q, n_k]"""
        return self._masked(self.head("scores", h) * self.scale)

    def logits(self) -> torch.Tensor:
        """What softmax sees: scores * scale with -inf where masked. [n_heads, n_q, n_k]"""
        return self._masked(self.scores * self.scale)

    def nbytes(self) -> int:
        """Bytes held by this layer's stored tensors (on any device)."""
        seen, total = set(), 0
        for raw in self.__dict__.values():
            if isinstance(raw, torch.Tensor) and raw.data_ptr() not in seen:
                seen.add(raw.data_ptr())
                total += raw.numel() * raw.element_size()
        return total

    def _rows(self, rows: slice | torch.Tensor | list | None) -> torch.Tensor:
        idx = torch.arange(self.n_q)
        if rows is None:
            return idx
        return idx[rows] if isinstance(rows, slice) else torch.as_tensor(rows)

    def allowed(self, rows: slice | torch.Tensor | list | None = None) -> torch.Tensor:
        """How many keys each query row may attend (the mask's row sums; a lean layer's from its
        rule, never an n x n tensor): the n of a row's uniform baseline 1/n. [rows] int64"""
        idx = self._rows(rows)
        mask = self.mask
        if mask is None:
            return torch.full((idx.numel(),), self.n_k, dtype=torch.long)
        return mask[idx.reshape(-1)].sum(-1).long()

    def key_span(self, r0: int, r1: int) -> tuple[int, int]:
        """The keys lo..hi-1 any of the query rows r0..r1-1 may see (a causal or windowed rule
        needs fewer; a stored mask: every key)."""
        return 0, self.n_k

    def compacted(self, half: tuple[str, ...] = (), qk_close: bool | None = None) -> LayerTrace:
        """This layer in fewer bytes (`compact`): scores recomputed from q and k on access when
        that gives the recorded values (checked here, or by the caller: `qk_close`, what
        scores_close_to_qk says of it; else kept); fields in `half` kept in float16. Shares
        tensors with this layer."""
        stored = {f: self.stored(f) for f in ("q", "k", "v", "scores", "mask", "weights", "z")}
        stored |= {f: self.stored(f) for f in ("output", "x", "f_norm")}
        new = LayerTrace(scale=self.scale, **stored)
        if qk_close is None:
            qk_close = scores_close_to_qk([self])[0]
        if qk_close:
            new.scores = _scores_from_qk  # recomputed on access: n x n per head not kept
        for name in half:
            t = stored[name]
            if t is not None and t.is_floating_point():
                setattr(new, name, t.half())
        return new


def scores_close_to_qk(layers: list[LayerTrace]) -> list[bool]:
    """For each layer, whether its stored scores are q·k as _scores_from_qk recomputes them
    (within 1e-4): layers of one shape are checked in one product, not one a layer (a class's
    trace of 30 layers: ~60 small calls fewer, in the trace workers)."""
    close = [False] * len(layers)
    groups: dict[tuple, list[int]] = {}
    for i, layer in enumerate(layers):
        q, k, scores = (layer.raw(f) for f in ("q", "k", "scores"))
        if scores is _scores_from_qk:  # compact already
            close[i] = True
        elif all(isinstance(t, torch.Tensor) for t in (q, k, scores)):
            groups.setdefault((q.shape, k.shape, scores.shape, q.device), []).append(i)
    for group in groups.values():
        q = torch.stack([layers[i].stored("q") for i in group]).float()  # [L, head, q, d]
        k = expand_kv(torch.stack([layers[i].stored("k") for i in group]).float(), q.shape[1])
        scores = torch.stack([layers[i].stored("scores") for i in group]).float()  # [L, h, q, k]
        # torch.isclose's test (NaN never close), in fewer passes than isclose itself makes
        off = (q @ k.transpose(-1, -2)).sub_(scores).abs_().sub_(scores.abs().mul_(1e-4))
        near = off.flatten(1).amax(1) <= 1e-4  # [L]; a NaN anywhere makes its amax NaN: False
        for i, ok in zip(group, near.tolist(), strict=True):
            close[i] = ok
    return close


def _recomputed(raw: Any) -> bool:
    """Whether a stored field is a function f(layer, head=None) that recomputes it."""
    return callable(raw) and not isinstance(raw, torch.Tensor)


def _scores_from_qk(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    """Raw q·k of every head [head, q, k], or of one head [q, k]."""
    q, k = layer.stored("q"), layer.stored("k")  # [head, q, d], [kv, k, d]
    if head is not None:
        return q[head].float() @ k[layer.kv_head(head)].float().T  # [q, k]
    k = expand_kv(k, q.shape[0])  # [head, k, d]
    return q.float() @ k.float().transpose(-1, -2)  # [head, q, k]


class LeanLayer(LayerTrace):
    """A LayerTrace whose `mask` is a MaskRule and whose scores and weights are recomputed from
    q, k, the rule, the scale and `lse` on access (see engine/lean.py)."""

    @property
    def holds_maps(self) -> bool:
        return False

    @property
    def in_bands(self) -> bool:
        return True

    @property
    def rule(self) -> MaskRule:
        """The mask as a rule (MaskRule.allowed answers any block)."""
        return self.raw("mask")

    def block(
        self,
        name: str,
        h: int,
        rows: slice | torch.Tensor | None = None,
        cols: slice | torch.Tensor | None = None,
    ) -> torch.Tensor:
        if name == "moved" and self._moved_on_access():
            return self._moved_block(h, rows, cols)
        return lean_block(self, name, h, rows, cols)

    def allowed(self, rows: slice | torch.Tensor | list | None = None) -> torch.Tensor:
        return allowed_counts(self.rule, self._rows(rows).reshape(-1)).long()

    def key_span(self, r0: int, r1: int) -> tuple[int, int]:
        return key_range(self.rule, r0, r1)

    def head_map(self, name: str, h: int, side: int) -> torch.Tensor:
        return pooled_head(self, h, side, side, name)  # never the whole n x n map at once

    def pooled(
        self, th: int, tw: int, name: str = "weights", specials: tuple[int, ...] = ()
    ) -> torch.Tensor:
        summary = summarize(self, (th, tw), specials)  # one pass gives both fields
        if name == "moved" and summary.pooled_moved is None:
            self.norms()  # says why there is no moved
        return summary.pooled if name == "weights" else summary.pooled_moved

    def weight_bands(
        self, cells: int
    ) -> Iterator[tuple[int, int, int, torch.Tensor, torch.Tensor | None]]:
        step = max(16, cells // max(1, self.n_heads * self.n_k))
        for r0 in range(0, self.n_q, step):
            r1 = min(self.n_q, r0 + step)
            w, expo, c0, _ = band(self, r0, r1)
            yield r0, r1, c0, w, expo

    def pass_due(self, side: Any, specials: tuple[int, ...], maps: bool = False) -> bool:
        return not made(self, side, specials)

    def make_pass(self, side: Any, specials: tuple[int, ...]) -> None:
        summarize(self, side, specials)

    def compacted(self, half: tuple[str, ...] = (), qk_close: bool | None = None) -> LayerTrace:
        return self  # nothing n x n to drop, and float16 would change what is recomputed
