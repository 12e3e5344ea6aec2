"""Why a head looks where it looks: one attention logit split exactly into what the query and the
key carry.

The input of a block at a position is a sum of parts (measures/qk_parts.py: the embeddings, each
earlier head's write, each earlier MLP's output, biases), every norm's scale frozen at its
position. The query and key projections are linear, a q/k norm (Qwen 3, Gemma 3, OLMo 2) is
linear once its scale is frozen at the position's own q or k, RoPE is a rotation at the
position, and a projection's bias is one more part. So, with a_i the query-side parts at i and
b_j the key-side parts at j,

    logit(i, j) = q_i · k_j × scale = Σ_a Σ_b (Q a_i) · (K b_j) × scale

exactly (up to float rounding): the number softmax reads at (i, j), before the mask (and any
softcap). `scale` is the trace's own (the knobs included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnviz.engine.attention import kv_head
from attnviz.engine.hooked.families import CROSS
from attnviz.engine.hooked.loading import Block, LoadedModel
from attnviz.engine.hooked.readout import block_of, freeze
from attnviz.engine.hooked.stacks import Side, head_dim, rotary, sides
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.measures.qk_parts import Part, block_parts, encoder_output_parts

if TYPE_CHECKING:
    import pandas as pd

# What each kind of part is made of, for the per-head summary: the position it sits at, the
# token there, earlier heads, MLPs, or a constant (a bias).
SOURCE = {
    "embedding": "token",
    "token type embedding": "token",
    "position embedding": "position",
    "head": "heads",
    "mlp": "mlp",
    "attention bias": "bias",
    "norm bias": "bias",
    "projection bias": "bias",
}
SOURCES = ("position", "token", "heads", "mlp", "bias")


@dataclass
class Projected:
    """One side's parts through a head's projection: `vectors` [part, position, d_head] as the
    softmax sees them (RoPE applied), `plain` the same before any rotation."""

    labels: list[tuple[str, int | None, int | None]]  # (kind, layer, head)
    vectors: torch.Tensor
    plain: torch.Tensor


def _where(trace: Trace, model: LoadedModel, part: str | None) -> tuple[str, Trace]:
    if part is None:
        part = trace.meta.get("part") or ("encoder" if model.kind == "encoder" else "decoder")
    return part, trace.part(part)


def _label(p: Part) -> tuple[str, int | None, int | None]:
    return (p.kind, p.layer, p.head)


def _cols(g: int, d_head: int) -> slice:
    return slice(g * d_head, (g + 1) * d_head)


def projection(parts: list[Part], side: Side) -> tuple[torch.Tensor, list[tuple]]:
    """The parts (each [positions, d_model]) through one side's whole projection, its bias a
    part of its own: [part, position, heads * d_head] and the parts' labels."""
    x = torch.stack([p.vector for p in parts])  # [part, pos, d_model]
    full = x @ side.weight  # [part, pos, heads * d_head]
    labels = [_label(p) for p in parts]
    if side.bias is not None:
        full = torch.cat([full, side.bias.expand(1, x.shape[1], -1)])
        labels.append(("projection bias", None, None))
    return full, labels


def project_all(
    parts: list[Part] | tuple[torch.Tensor, list[tuple]],
    side: Side,
    d_head: int,
    rope: tuple | None,
) -> Projected:
    """The parts (or their `projection`) through every head of one side: the projection, the
    q/k norm frozen at each position's own projection (per head, or over all heads: OLMo 2),
    then the rotation at each position (`rope`: the family's function, cos, sin [pos, d]).
    `vectors` and `plain` are [part, head, position, d_head]."""
    full, labels = projection(parts, side) if isinstance(parts, list) else parts
    n_parts, n, width = full.shape
    heads = width // d_head
    out = full.view(n_parts, n, heads, d_head)
    if side.norm is not None:
        total = full.sum(0)  # [pos, heads * d_head] the projection the norm sees
        if side.per_head_norm:
            frozen = freeze(side.norm, total.reshape(n * heads, d_head).float())
            out = out / frozen.scale.reshape(n, heads, 1) * frozen.weight
        else:  # OLMo 2: one norm over every head's columns
            frozen = freeze(side.norm, total.float())
            out = (full / frozen.scale * frozen.weight).view(n_parts, n, heads, d_head)
    out = out.permute(0, 2, 1, 3)  # [part, head, pos, d_head]
    plain = out
    if rope is not None:
        fn, cos, sin = rope
        out, _ = fn(out, out, cos.double().unsqueeze(0), sin.double().unsqueeze(0))
    return Projected(labels, out, plain)


def project(
    parts: list[Part] | tuple[torch.Tensor, list[tuple]],
    side: Side,
    g: int,
    d_head: int,
    rope: tuple | None,
) -> Projected:
    """As project_all, for head g alone: vectors and plain [part, position, d_head]."""
    every = project_all(parts, side, d_head, rope)
    return Projected(every.labels, every.vectors[:, g], every.plain[:, g])


def _rope(block: Block, cos_sin: tuple | None, rows: list[int]) -> tuple | None:
    """The block's rotation at `rows` of the positions read: its function, cos and sin."""
    fn = rotary(block)
    if not cos_sin or cos_sin[0] is None or fn is None:
        return None
    return fn, cos_sin[0][rows], cos_sin[1][rows]


@dataclass
class Split:
    """A (query, key) cell's logit split: `scores` [query part, key part] (× scale)."""

    q: Projected
    k: Projected
    scores: torch.Tensor  # [Pq, Pk] float64
    logit: float  # from the trace: q_i · k_j × scale
    unrotated: torch.Tensor | None  # [Pq, Pk] the same with no rotation (RoPE families)


def _traced(trace: Trace, layer: int) -> LayerTrace:
    if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < len(trace.layers):
        raise ValueError(
            f"layer={layer!r} is not a layer of this trace (0..{len(trace.layers) - 1})"
        )
    return trace.layers[layer]


def _check_head(traced: LayerTrace, head: int) -> None:
    if not isinstance(head, int) or isinstance(head, bool) or not 0 <= head < traced.n_heads:
        raise ValueError(f"head={head!r} is not a head of this layer (0..{traced.n_heads - 1})")


def _position(value: Any, n: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be a token position (an int), not {value!r}")
    pos = value + n if value < 0 else value
    if not 0 <= pos < n:
        raise ValueError(f"{what}={value} is outside the {n} tokens")
    return pos


def _sides_at(
    model: LoadedModel, trace: Trace, block: Block, q_pos: list[int], k_pos: list[int], h: int
) -> tuple[Projected, Projected]:
    """The query-side parts at q_pos and the key-side parts at k_pos, through head h."""
    d_head = head_dim(block)
    q_side, k_side = sides(block, d_head)
    g = kv_head(h, block.n_heads, block.n_kv_heads)
    if block.part == CROSS:
        q_parts, _ = block_parts(model, trace, block, q_pos)
        k_parts = encoder_output_parts(model, trace, k_pos)
        return (
            project(q_parts, q_side, h, d_head, None),
            project(k_parts, k_side, g, d_head, None),
        )
    every = sorted(set(q_pos) | set(k_pos))
    parts, cos_sin = block_parts(model, trace, block, every)
    qr, kr = [every.index(p) for p in q_pos], [every.index(p) for p in k_pos]
    q = project(_rows(parts, qr), q_side, h, d_head, _rope(block, cos_sin, qr))
    k = project(_rows(parts, kr), k_side, g, d_head, _rope(block, cos_sin, kr))
    return q, k


def _rows(parts: list[Part], rows: list[int]) -> list[Part]:
    return [Part(p.kind, p.layer, p.head, p.vector[rows], p.part) for p in parts]


def split_cell(
    model: LoadedModel,
    trace: Trace,
    layer: int,
    head: int,
    query: int,
    key: int | None,
    part: str | None = None,
) -> tuple[Split, int, int, Trace]:
    """The split of one cell; `key` None: the key the head weighs most at `query`."""
    part, traced_part = _where(trace, model, part)
    traced = _traced(traced_part, layer)
    _check_head(traced, head)
    i = _position(query, traced.n_q, "query")
    allowed = traced.block("mask", head, [i])[0]  # [n_k] bool
    if key is None:
        key = int(traced.block("weights", head, [i]).reshape(-1).argmax())
    j = _position(key, traced.n_k, "key")
    if not bool(allowed[j]):
        raise ValueError(
            f"query {i} may not attend to key {j} in this layer (masked): its logit is not one "
            "softmax reads"
        )
    block = block_of(model, part, layer)
    q, k = _sides_at(model, trace, block, [i], [j], head)
    scale = float(traced.scale)
    scores = q.vectors[:, 0] @ k.vectors[:, 0].T * scale  # [Pq, Pk]
    unrotated = None
    if not torch.equal(q.vectors, q.plain) or not torch.equal(k.vectors, k.plain):
        unrotated = q.plain[:, 0] @ k.plain[:, 0].T * scale
    logit = float(traced.block("scores", head, [i], [j])[0, 0]) * scale
    _agrees(q, traced.head("q", head)[i], "query")
    _agrees(k, traced.head("k", traced.kv_head(head))[j], "key")
    return Split(q, k, scores, logit, unrotated), i, j, traced_part


def _agrees(side: Projected, want: torch.Tensor, what: str) -> None:
    got = side.vectors.sum(0)[0]
    if (got - want.double()).abs().max() > 1e-3 * (1 + float(want.abs().max())):
        raise ValueError(
            f"the {what} parts do not add up to the {what} this trace holds: the trace was made "
            "with other knobs or weights, or this model's attention is not laid out as attnviz "
            "expects"
        )


def _columns(labels: list[tuple], prefix: str, repeat: int, tile: int) -> dict[str, Any]:
    kinds, layers, heads = zip(*labels, strict=True)
    out = {f"{prefix}_kind": np.repeat(np.array(kinds, dtype=object), repeat)}
    for name, values in (("layer", layers), ("head", heads)):
        arr = np.array([-1 if v is None else v for v in values])
        out[f"{prefix}_{name}"] = np.repeat(arr, repeat)
    if tile > 1:
        out = {k: np.tile(v, tile) for k, v in out.items()}
    return out


def qk_attribution(
    model: LoadedModel,
    trace: Trace,
    layer: int,
    head: int,
    query: int,
    key: int | None = None,
    part: str | None = None,
) -> pd.DataFrame:
    """Head `head` of `layer`'s logit at (query, key) split into one row per (query-side part,
    key-side part): columns q_kind, q_layer, q_head, k_kind, k_layer, k_head (kinds as
    head_logits names its rows: embedding, position embedding, token type embedding, head,
    attention bias, mlp, norm bias, projection bias; layer and head <NA> where a part has none)
    and score; the scores add up to the logit. `key` None: the key the head weighs most at
    `query`. `part`: "encoder", "decoder" or "cross" for an encoder-decoder (default: the
    trace's own). attrs: logit (q·k × scale, before the mask and any softcap), key, query,
    query_token, key_token, and rotation (the part of the logit RoPE's rotation makes: the
    logit less the same sum with neither side rotated; 0.0 without RoPE)."""
    import pandas as pd

    split, i, j, tr = split_cell(model, trace, layer, head, query, key, part)
    pq, pk = split.scores.shape
    cols = _columns(split.q.labels, "q", pk, 1) | _columns(split.k.labels, "k", 1, pq)
    cols["score"] = split.scores.reshape(-1).numpy()
    table = pd.DataFrame(cols)
    for c in ("q_layer", "q_head", "k_layer", "k_head"):
        table[c] = table[c].astype("Int64").mask(table[c] < 0)
    rotation = 0.0 if split.unrotated is None else float(split.scores.sum() - split.unrotated.sum())
    keys = tr.key_tokens or tr.tokens
    table.attrs.update(
        logit=split.logit,
        key=j,
        query=i,
        query_token=tr.tokens[i],
        key_token=keys[j],
        rotation=rotation,
        layer=layer,
        head=head,
    )
    return table
