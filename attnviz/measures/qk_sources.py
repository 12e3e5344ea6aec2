"""The logit split (measures/qk.py) over many cells: every key one query may see, with the parts
of one side (which part makes each key win), and every head's top-weight cells pooled by what
the parts are made of (the atlas's "why" columns).

A part's source: the position it sits at (a position embedding), the token there (the token's
embedding, the segment's), earlier heads, MLPs, or a constant (a bias). A pair of a query-side
part and a key-side part gives half its score to each side's source. With RoPE, position is not
a part of the stream but a rotation of q and k: the logit less the same sum with neither side
rotated is the rotation's, counted as position; the rest is split as above. The five sources add
up to the logit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from attnviz.engine.attention import kv_head
from attnviz.engine.hooked.families import CROSS
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.readout import block_of
from attnviz.engine.hooked.stacks import head_dim, sides
from attnviz.engine.trace import Trace
from attnviz.measures.qk import (
    SOURCE,
    SOURCES,
    Projected,
    _check_head,
    _position,
    _rope,
    _traced,
    _where,
    project,
    project_all,
)
from attnviz.measures.qk_parts import Part, block_parts, stack_parts

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 64  # positions walked at once for the per-key form (parts x 64 x d_model float64)


def _grouped(parts: list[Part]) -> list[Part]:
    """The parts summed by source, one part per source (SOURCES' order; zeros where none)."""
    like = parts[0].vector
    sums = {s: torch.zeros_like(like) for s in SOURCES}
    for p in parts:
        source = SOURCE.get(p.kind, p.kind)  # a part summed already is named by its source
        sums[source] = sums[source] + p.vector
    return [Part(s, None, None, v) for s, v in sums.items()]


def qk_keys(
    model: LoadedModel,
    trace: Trace,
    layer: int,
    head: int,
    query: int,
    side: str = "key",
    part: str | None = None,
    keys: list[int] | None = None,
) -> pd.DataFrame:
    """For one query, every key it may see with its logit split over one side's parts, the
    other side whole: side="key" gives (k part at j) · q_i × scale per key j and key-side part,
    side="query" (q part at i) · k_j × scale. Columns: key, kind, layer, head (<NA> where a part
    has none), score; per key the scores add up to its logit. `keys`: these keys only (each one
    the row may see; default every one). attrs: query, side, logits (per key, in the frame's key
    order), tokens (the keys' tokens)."""
    import pandas as pd

    if side not in ("key", "query"):
        raise ValueError(f"side={side!r} must be 'key' or 'query'")
    part, tr = _where(trace, model, part)
    traced = _traced(tr, layer)
    _check_head(traced, head)
    i = _position(query, traced.n_q, "query")
    seen = torch.nonzero(traced.block("mask", head, [i])[0]).reshape(-1).tolist()
    if keys is None:
        keys = seen
    else:
        keys = sorted({_position(j, traced.n_k, "key") for j in keys})
        if set(keys) - set(seen):
            raise ValueError(f"query {i} may not attend to keys {sorted(set(keys) - set(seen))}")
    block = block_of(model, part, layer)
    if block.part == CROSS:
        raise ValueError("the per-key form reads one stack: pick a cell of a cross block instead")
    scale = float(traced.scale)
    d_head = head_dim(block)
    q_side, k_side = sides(block, d_head)
    g = kv_head(head, block.n_heads, block.n_kv_heads)
    q_i = traced.head("q", head)[i].double()  # [d_head]
    k_all = traced.head("k", g).double()  # [n_k, d_head]
    frames, labels = [], None
    for c0 in range(0, len(keys), CHUNK):
        chunk = keys[c0 : c0 + CHUNK]
        at = sorted(set(chunk) | ({i} if side == "query" else set()))
        parts, cos_sin = block_parts(model, trace, block, at)
        if side == "key":
            rows = [at.index(j) for j in chunk]
            k = project([_row(p, rows) for p in parts], k_side, g, d_head,
                        _rope(block, cos_sin, rows))  # fmt: skip
            s = torch.einsum("pkd,d->kp", k.vectors, q_i) * scale  # [keys, parts]
        else:
            row = [at.index(i)]
            q = project([_row(p, row) for p in parts], q_side, head, d_head,
                        _rope(block, cos_sin, row))  # fmt: skip
            s = (k_all[chunk] @ q.vectors[:, 0].T) * scale  # [keys, parts]
            k = q
        labels = k.labels
        frames.append(s)
    scores = torch.cat(frames)  # [keys, parts]
    kinds, layers, heads = zip(*labels, strict=True)
    n_parts = len(labels)
    table = pd.DataFrame({
        "key": np.repeat(np.array(keys), n_parts),
        "kind": np.tile(np.array(kinds, dtype=object), len(keys)),
        "layer": pd.array(np.tile(np.array(layers, dtype=object), len(keys)), dtype="Int64"),
        "head": pd.array(np.tile(np.array(heads, dtype=object), len(keys)), dtype="Int64"),
        "score": scores.reshape(-1).numpy(),
    })  # fmt: skip
    key_tokens = tr.key_tokens or tr.tokens
    table.attrs.update(
        query=i, side=side, logits=scores.sum(1).tolist(),
        tokens=[key_tokens[j] for j in keys], layer=layer, head=head,
    )  # fmt: skip
    return table


def _row(p: Part, rows: list[int]) -> Part:
    return Part(p.kind, p.layer, p.head, p.vector[rows], p.part)


def _folded(side: Projected) -> Projected:
    """A projection's bias (its last part, where it has one) added to the "bias" source."""
    if len(side.labels) == len(SOURCES):
        return side
    at = SOURCES.index("bias")
    vectors, plain = side.vectors[:-1].clone(), side.plain[:-1].clone()
    vectors[at] += side.vectors[-1]
    plain[at] += side.plain[-1]
    return Projected(side.labels[:-1], vectors, plain)


def source_sums(model: LoadedModel, trace: Trace) -> dict[tuple[str, int], np.ndarray]:
    """Every head's top-weight cells (each query row with the key it weighs most) split by
    source and summed over the rows: {(part, layer): [heads, len(SOURCES)] float64}, the row
    count being the number of query rows with a key. One rerun a stack (cross blocks left out:
    their keys come from another stack)."""
    out: dict[tuple[str, int], np.ndarray] = {}
    parts_of = ("encoder", "decoder") if model.kind == "encoder-decoder" else (None,)
    for name in parts_of:
        part, tr = _where(trace, model, name)
        n = len(tr.tokens)
        stack, walk, got = stack_parts(model, trace, part, list(range(n)), collapse=_grouped)
        for i, b, parts in walk:
            if i < 0:
                break
            block = stack.blocks[i][b]
            if block.part == CROSS:
                continue
            cos_sin = got.extra.get(f"{stack.prefix}att{i}.{b}")
            out[(block.part, i)] = _layer_sources(model, tr, block, _grouped(parts), cos_sin)
    return out


def _layer_sources(model, tr: Trace, block, grouped: list[Part], cos_sin) -> np.ndarray:
    """Every head of one block at once: [heads, len(SOURCES)]."""
    traced = tr.layers[block.layer]
    d_head = head_dim(block)
    q_side, k_side = sides(block, d_head)
    rope = _rope(block, cos_sin, list(range(traced.n_q)))
    q = _folded(project_all(grouped, q_side, d_head, rope))  # [C, head, n, d]
    k = _folded(project_all(grouped, k_side, d_head, rope))  # [C, kv head, n, d]
    heads = block.n_heads
    group = torch.tensor([kv_head(h, heads, block.n_kv_heads) for h in range(heads)])
    w = torch.stack([traced.block("weights", h) for h in range(heads)])  # [head, n, n]
    live = (w.sum(-1) > 0).double()  # [head, n] rows with a key
    top = w.argmax(-1)  # [head, n] each row's strongest key
    at = top[None, :, :, None].expand(k.vectors.shape[0], heads, -1, k.vectors.shape[-1])
    k_top = k.vectors[:, group].gather(2, at)  # [C, head, n, d] the key side at the top key
    k_top_plain = k.plain[:, group].gather(2, at)
    m = torch.einsum("ahid,bhid->hiab", q.vectors, k_top) * traced.scale  # [head, n, C, C]
    u = torch.einsum("ahid,bhid->hiab", q.plain, k_top_plain) * traced.scale
    out = (u.sum(3) + u.sum(2)) / 2  # [head, n, C]
    out[..., SOURCES.index("position")] += (m - u).sum((2, 3))
    return (out * live.unsqueeze(-1)).sum(1).numpy()
