"""Trace and LayerTrace: every per-head tensor of one run, no batch dimension.

What is stored may live on a GPU, be float16 or be recomputed on access; every field reads as a CPU
float32 tensor (see LayerTrace). Statistics over a trace are in attnviz.measures.stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from attnviz.engine.bands import specials_of, summaries
from attnviz.engine.lean import MaskRule, lean_block
from attnviz.engine.writes import f_norm_of, moved_block, moved_of

_MISSING = object()


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

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_stored_{name}"

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

    A lean layer (long inputs, attnviz.engine.lean) stores no n x n tensor: `mask` is a MaskRule,
    `lse` is kept, and scores and weights are recomputed exactly on access.
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

    @property
    def lean(self) -> bool:
        """Whether scores and weights are recomputed from q, k, the mask rule and lse."""
        return isinstance(self.__dict__.get("_stored_mask"), MaskRule)

    @property
    def n_q(self) -> int:
        return self.stored("q").shape[1]

    @property
    def n_k(self) -> int:
        return self.stored("k").shape[1]

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
        if name == "moved" and self.__dict__.get("_stored_moved") is moved_of:
            return moved_block(self, h, rows, cols)
        if self.lean:
            return lean_block(self, name, h, rows, cols)
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
        raw = self.__dict__[f"_stored_{name}"]
        if callable(raw) and not isinstance(raw, torch.Tensor):
            return raw(self) if h is None else raw(self, h)
        return raw if h is None else raw[h]

    def stored(self, name: str) -> torch.Tensor | None:
        """The tensor as stored (device and dtype untouched; recomputed if stored as a function)."""
        return self._read(name)

    def head(self, name: str, h: int) -> torch.Tensor:
        """One head of a per-head field, CPU float32: on a GPU trace only that head is copied, and
        a recomputed field (a compact trace's scores) computes only that head."""
        return to_view(self._read(name, h))

    def _masked(self, logits: torch.Tensor) -> torch.Tensor:
        mask = self.mask  # [q, k], broadcasts over heads (a lean layer's rule, materialised)
        return logits if mask is None else logits.masked_fill(~mask, float("-inf"))

    def head_logits(self, h: int) -> torch.Tensor:
        """What softmax sees for one head: scores * scale with -inf where masked. [n_q, n_k]"""
        return self._masked(self.head("scores", h) * self.scale)

    def nbytes(self) -> int:
        """Bytes held by this layer's stored tensors (on any device)."""
        seen, total = set(), 0
        for raw in self.__dict__.values():
            if isinstance(raw, torch.Tensor) and raw.data_ptr() not in seen:
                seen.add(raw.data_ptr())
                total += raw.numel() * raw.element_size()
        return total

    @property
    def n_heads(self) -> int:
        return self.stored("q").shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.stored("k").shape[0]

    def allowed(self, rows: slice | torch.Tensor | list | None = None) -> torch.Tensor:
        """How many keys each query row may attend (the mask's row sums; a lean layer's from its
        rule, never an n x n tensor): the n of a row's uniform baseline 1/n. [rows] int64"""
        stored = self.__dict__.get("_stored_mask")
        idx = torch.arange(self.n_q)
        idx = (
            idx if rows is None else idx[rows] if isinstance(rows, slice) else torch.as_tensor(rows)
        )
        if isinstance(stored, MaskRule):
            from attnviz.engine.bands import allowed_counts

            return allowed_counts(stored, idx.reshape(-1)).long()
        mask = self.mask
        if mask is None:
            return torch.full((idx.numel(),), self.n_k, dtype=torch.long)
        return mask[idx.reshape(-1)].sum(-1).long()

    def kv_head(self, h: int) -> int:
        """The K/V head query head h reads (GQA: h // (n_heads // n_kv_heads), as torch's
        enable_gqa)."""
        return h // (self.n_heads // self.n_kv_heads)

    def logits(self) -> torch.Tensor:
        """What softmax sees: scores * scale with -inf where masked. [n_heads, n_q, n_k]"""
        return self._masked(self.scores * self.scale)


@dataclass
class Trace:
    """A whole run: tokens, one LayerTrace per layer, and where it came from.

    `key_tokens` differs from `tokens` only for cross-attention (the toy stack with a text pair).
    BERT traces also fill `token_types`, `special`, `hidden` [n, d_model] and `embedding` [d_model].
    """

    tokens: list[str]
    layers: list[LayerTrace]
    source: str
    key_tokens: list[str] | None = None
    truncated: bool = False
    n_input_tokens: int | None = None
    token_types: list[int] | None = None
    special: dict[str, list[int]] = field(default_factory=dict)
    hidden: torch.Tensor | None = None
    embedding: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # A decoder's logits after the last token [vocab] (softmax: the next-token probabilities).
    next_logits: torch.Tensor | None = None
    # An encoder-decoder's other attentions, each a Trace: "decoder" (self) and "cross" (keys are
    # this trace's tokens). This trace is the encoder's.
    parts: dict[str, Trace] = field(default_factory=dict)
    # The TraceRequest this trace answers (attnviz.engine.request; its parts share it), or None
    # for a trace made without one: what a server's cache and a fragment know it by.
    request: Any = None
    # The token ids behind `tokens` (which are labels: byte pieces read as characters, so not
    # always the vocabulary's spelling), for a rerun of the same input; None where unknown.
    token_ids: list[int] | None = None
    # Values derived from this trace for views (a figure, a table), kept as long as it lives: a
    # server memoizes them here (attnviz.serve.memos), so they go with the trace, never in a
    # table of their own.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.key_tokens is None:
            self.key_tokens = list(self.tokens)
        if self.n_input_tokens is None:
            self.n_input_tokens = len(self.tokens)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].n_heads if self.layers else 0

    def part(self, name: str) -> Trace:
        """This trace or one of its parts by name ("encoder", "decoder", "cross")."""
        if name == self.meta.get("part", name) or (name == "encoder" and not self.parts):
            return self
        if name not in self.parts:
            raise ValueError(f"no {name!r} attention here; parts: {sorted(self.parts)}")
        return self.parts[name]

    @property
    def is_cross(self) -> bool:
        return self.key_tokens != self.tokens

    def weights(self) -> torch.Tensor:
        """All weights stacked. [layer, head, q, k]"""
        return torch.stack([layer.weights for layer in self.layers])

    def nbytes(self) -> int:
        """Bytes held by the trace's tensors: what a byte-bounded cache counts."""
        extra = sum(
            t.numel() * t.element_size() for t in (self.hidden, self.embedding) if t is not None
        )
        return extra + sum(layer.nbytes() for layer in self.layers)


def pooled_weights(trace: Trace, th: int, tw: int, name: str = "weights") -> torch.Tensor:
    """Every head's weights (or `name` "moved") average-pooled to at most th x tw, computed where
    the trace lives (a GPU trace copies only the pooled mosaic). [layer, head, <=th, <=tw], CPU
    float32"""
    if name not in ("weights", "moved"):
        raise ValueError(f'name={name!r} must be "weights" or "moved"')
    # A band of rows at a time, all heads; made here one layer after another unless a server
    # made them already (attnviz.serve.bandpool: a layer per core). One pass gives both fields.
    lean = [layer for layer in trace.layers if layer.lean]
    pooled = iter(summaries(lean, (th, tw), specials_of(trace)))
    out = []
    for layer in trace.layers:
        if layer.lean:  # never n x n for all heads
            summary = next(pooled)
            if name == "moved" and summary.pooled_moved is None:
                f_norm_of(layer)  # says why there is no moved
            out.append(summary.pooled if name == "weights" else summary.pooled_moved)
            continue
        if getattr(layer, "grouped", False):  # words of pieces (measures/words.py), in bands
            out.append(layer.pooled(th, tw, name))
            continue
        w = layer.stored("weights") if name == "weights" else layer.moved  # [head, q, k]
        n_q, n_k = w.shape[-2:]
        if n_q > th or n_k > tw:
            w = torch.nn.functional.adaptive_avg_pool2d(w.float(), (min(th, n_q), min(tw, n_k)))
        out.append(to_view(w))
    return torch.stack(out)  # [layer, head, q', k']


def _scores_from_qk(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    """Raw q·k of every head [head, q, k], or of one head [q, k]."""
    q, k = layer.stored("q"), layer.stored("k")  # [head, q, d], [kv, k, d]
    group = q.shape[0] // k.shape[0]  # query heads per K/V head
    if head is not None:
        return q[head].float() @ k[head // group].float().T  # [q, k]
    k = k.repeat_interleave(group, dim=0)  # [head, k, d]
    return q.float() @ k.float().transpose(-1, -2)  # [head, q, k]


def compact(trace: Trace, half: tuple[str, ...] = ()) -> Trace:
    """The same trace in fewer bytes, for caches: `scores` (n x n per head, 44% of a BERT trace)
    is recomputed from q and k on access when that gives the recorded values (checked here, else
    kept). Fields named in `half` are kept in float16 and read back as float32 (~5e-4 relative:
    invisible in a heatmap, but not in the numbers the pages print and the tests pin to 1e-5, so
    the app keeps float32). Shares tensors with `trace`; treat both as read-only."""
    layers = []
    for layer in trace.layers:
        if layer.lean or getattr(layer, "grouped", False):  # nothing recomputable from q, k
            layers.append(layer)
            continue
        stored = {f: layer.stored(f) for f in ("q", "k", "v", "scores", "mask", "weights", "z")}
        stored |= {f: layer.stored(f) for f in ("output", "x", "f_norm")}
        new = LayerTrace(scale=layer.scale, **stored)
        recomputed = _scores_from_qk(layer)
        if torch.allclose(recomputed, stored["scores"].float(), rtol=1e-4, atol=1e-4):
            new.scores = _scores_from_qk  # recomputed on access: n x n per head not kept
        for name in half:
            t = stored[name]
            if t is not None and t.is_floating_point():
                setattr(new, name, t.half())
        layers.append(new)
    # the residual stream read while tracing (engine/hooked/stream.py) holds for the same numbers
    streams = {k: v for k, v in trace.memo.items() if isinstance(k, tuple) and k[:1] == ("stream",)}
    return Trace(**{**trace.__dict__, "layers": layers, "memo": streams})
