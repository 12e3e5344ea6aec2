"""Trace and LayerTrace: every per-head tensor of one run, no batch dimension.

What is stored may live on a GPU, be float16 or be recomputed on access; every field reads as a CPU
float32 tensor (see LayerTrace, whose kinds are in attnviz.engine.layer). Statistics over a trace
are in attnviz.measures.stats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from attnviz.engine.bands import specials_of
from attnviz.engine.layer import LayerTrace, LeanLayer, scores_close_to_qk, to_view

__all__ = ["LayerTrace", "LeanLayer", "Trace", "compact", "pooled_weights", "rows_per_band",
           "to_view"]  # fmt: skip


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

    @property
    def unit(self) -> str:
        """What a token of this trace is: "pieces", or "word" / "char" for a trace grouped so
        (attnviz.grouped)."""
        return self.meta.get("grouped") or "pieces"

    def has(self, name: str) -> bool:
        """Whether every layer has field `name` (a trace of words has no scores; a trace from
        weights alone no moved)."""
        return bool(self.layers) and all(layer.has(name) for layer in self.layers)

    def weights(self) -> torch.Tensor:
        """All weights stacked. [layer, head, q, k]"""
        return torch.stack([layer.weights for layer in self.layers])

    def kept_bytes(self) -> tuple[int, int] | None:
        """For a long input's lean trace (no n x n tensor kept): the bytes it holds and the bytes
        the same trace with every n x n map would; None for any other trace."""
        if not any(layer.in_bands for layer in self.layers):
            return None
        from attnviz.engine.budget import model_trace_bytes

        d_head = self.layers[0].stored("q").shape[-1]
        full = model_trace_bytes(self.n_layers, self.n_heads, d_head, 1, len(self.tokens))
        return self.nbytes(), full

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
    # a layer in bands: a band of rows at a time, all heads, one layer after another unless a
    # server made them already (attnviz.serve.bandpool: a layer per core)
    specials = specials_of(trace)
    return torch.stack([layer.pooled(th, tw, name, specials) for layer in trace.layers])


def rows_per_band(n_cols: int) -> int:
    """How many query rows to read at a time when each row spans `n_cols` keys (of one or
    several maps): a band stays near the engine's block of cells, never n x n at once."""
    from attnviz.engine.lean import BLOCK_CELLS

    return max(1, BLOCK_CELLS // max(1, n_cols))


def compact(trace: Trace, half: tuple[str, ...] = ()) -> Trace:
    """The same trace in fewer bytes, for caches: `scores` (n x n per head, 44% of a BERT trace)
    is recomputed from q and k on access when that gives the recorded values (checked here, else
    kept). Fields named in `half` are kept in float16 and read back as float32 (~5e-4 relative:
    invisible in a heatmap, but not in the numbers the pages print and the tests pin to 1e-5, so
    the app keeps float32). A layer with nothing recomputable from q and k stays as it is.
    Shares tensors with `trace`; treat both as read-only."""
    close = scores_close_to_qk(trace.layers)
    layers = [layer.compacted(half, ok) for layer, ok in zip(trace.layers, close, strict=True)]
    # the residual stream read while tracing (engine/hooked/stream.py) holds for the same numbers
    streams = {k: v for k, v in trace.memo.items() if isinstance(k, tuple) and k[:1] == ("stream",)}
    return Trace(**{**trace.__dict__, "layers": layers, "memo": streams})
