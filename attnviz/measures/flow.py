"""Information-flow routes (Ferrando & Voita 2024, arXiv 2403.00824; the LLM Transparency Tool's
contribution graph): which earlier states, through which heads and MLPs, a prediction is built
from, read from one forward pass.

The nodes are residual states (layer, stage, position): stage "mid" is the stream after layer
l's attention, "out" after the whole layer (its MLP too); layer -1 "out" is the embeddings. Each
state is a sum of parts, each coming from an earlier node:

    mid(l, i) = out(l-1, i) + Σ_h Σ_j α^h_ij · W_O^h v^h_j  (+ W_O's bias)
    out(l, i) = mid(l, i) + MLP(mid(l, i))

(a post-attention norm, Gemma 3's and OLMo 2's, is frozen at the attention output of position
i, so each head's part goes through it; Granite's residual multiplier scales every part). A
part c's proximity to its node's state y is max(‖y‖₁ − ‖y − c‖₁, 0); normalised over the node's
parts it is the part's `share`. Parts whose share is at most `threshold` are dropped and the
rest renormalised (`weight`), as the tool does; the graph is every kept edge reachable backwards
from the last layer's state at the chosen position. Where the tool sums a source token's heads
into one edge (and adds the residual to it), each head and the residual here are rows of their
own: an edge (summed) passes the threshold exactly when one of its heads does. W_O's bias (GPT-2)
is a part of its own, with no source node; the tool leaves it out, so that its parts do not add
up to the node.

Lean traces hold no n x n weights: the graph needs only the weight rows of the positions it
reaches, layer by layer, recomputed for those rows (LayerTrace.block); the states between layers
come from one rerun of the input with hooks (engine/hooked/stream.read_states).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.readout import (
    FrozenNorm,
    attention_out_norm,
    block_of,
    decoder_layers,
    freeze,
    post_ln_norms,
    residual_multiplier,
    w_o_bias,
    w_o_matrix,
)
from attnviz.engine.hooked.stream import position_in, read_states
from attnviz.engine.trace import LayerTrace, Trace

if TYPE_CHECKING:
    import pandas as pd

THRESHOLD = 0.04  # the LLM Transparency Tool's default
KEYS = 256  # keys whose parts are made at once for one node (heads x KEYS x d_model floats)
ROWS = 64  # weight rows read at once (heads x ROWS x n floats)
COLUMNS = ("dst_layer", "dst_stage", "dst_pos", "src_layer", "src_stage", "src_pos", "kind")
COLUMNS += ("head", "share", "weight")


def _check(model: LoadedModel, trace: Trace, threshold: float) -> None:
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), not {type(model).__name__}")
    if model.kind != "decoder":
        raise ValueError(
            f"{model.name!r} is an {model.kind}: the information-flow graph follows a decoder's"
            " residual stream to its next-token prediction (GPT-2, Llama, Qwen, Gemma, SmolLM2)"
        )
    if any(post_ln_norms(model, layer) for layer in decoder_layers(model)):
        raise ValueError(f"{model.name!r} normalises after each sublayer: its states are no sums")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"threshold must be a number, not {type(threshold).__name__}")
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold={threshold} must be at least 0 and below 1 (default 0.04)")


def proximity(parts: torch.Tensor, whole: torch.Tensor) -> torch.Tensor:
    """max(‖y‖₁ − ‖y − c‖₁, 0) for each part c [..., d] of y [d], summed term by term
    (|y_k| − |y_k − c_k|, each at most |c_k|) so that a small part is not lost to rounding. [...]"""
    return (whole.abs() - (whole - parts).abs()).sum(-1).clamp_min(0)


@dataclass
class _Attention:
    """Layer l's attention as its parts reach the residual stream: each head's write from each
    key (f[h, j] = W_O^h v_j, before the weights), the bias, the norm after attention and the
    residual multiplier."""

    index: int  # the layer's number
    layer: LayerTrace
    f: torch.Tensor  # [head, n, d_model]
    bias: torch.Tensor | None  # [d_model]
    norm: object | None  # the post-attention norm module, or None
    mult: float

    def frozen(self, i: int) -> FrozenNorm | None:
        """The post-attention norm frozen at position i's attention output (None: no norm)."""
        if self.norm is None:
            return None
        return freeze(self.norm, self.layer.stored("output")[i].float())

    def reach(self, x: torch.Tensor, frozen: FrozenNorm | None) -> torch.Tensor:
        """Parts of the attention output as they reach the stream. [..., d_model] float32"""
        if frozen is not None:
            x = (x / frozen.scale * frozen.weight.float()).float()
        return x * self.mult


def _attention(model: LoadedModel, trace: Trace, i: int) -> _Attention:
    block = block_of(model, "decoder", i)
    layer = trace.layers[i]
    v = layer.stored("v").float().cpu()  # [kv_head, n, d_head]
    w = w_o_matrix(block).detach().float().cpu()  # [head * d_head, d_model]
    n_heads, d_head = layer.n_heads, v.shape[-1]
    w = w.reshape(n_heads, d_head, -1)  # [head, d_head, d_model]
    off = {h for la, h in trace.meta.get("ablate", ()) if la == i}  # silenced: they write 0
    f = torch.stack(
        [
            torch.zeros(v.shape[1], w.shape[-1]) if h in off else v[layer.kv_head(h)] @ w[h]
            for h in range(n_heads)
        ]
    )  # [head, n, d_model]
    bias = w_o_bias(block)
    bias = None if bias is None else bias.detach().float().cpu()
    norm = attention_out_norm(model, decoder_layers(model)[i])
    return _Attention(i, layer, f, bias, norm, residual_multiplier(model))


def _weight_rows(layer: LayerTrace, rows: list[int]) -> torch.Tensor:
    """Every head's weights on the query rows `rows` (a lean layer recomputes only them).
    [head, len(rows), n_k]"""
    idx = torch.tensor(rows)
    return torch.stack([layer.block("weights", h, idx) for h in range(layer.n_heads)])


@dataclass
class _Node:
    """One node's parts' proximities, kept for the table: src (layer, stage, position) and head
    of each part (None: no source node, a bias), and the proximities. [parts]"""

    sources: list[tuple[int | None, str | None, int | None, str, int | None]]
    prox: torch.Tensor


def _mid_node(
    att: _Attention, i: int, alpha: torch.Tensor, x_in: torch.Tensor, y: torch.Tensor
) -> _Node:
    """Node (l, mid, i) in state y: its residual part x_in, every head's part from every key it
    sees, the bias. alpha: the row's weights [head, n_k]."""
    frozen = att.frozen(i)
    bias = None if att.bias is None else att.reach(att.bias, frozen)
    seen = alpha.amax(0) > 0  # [n_k] keys some head weighs
    keys = seen.nonzero().flatten()
    prox = [proximity(x_in, y).reshape(1)]
    for k0 in range(0, len(keys), KEYS):
        js = keys[k0 : k0 + KEYS]
        c = att.reach(alpha[:, js].unsqueeze(-1) * att.f[:, js], frozen)  # [head, keys, d_model]
        prox.append(proximity(c, y).T.reshape(-1))  # [keys * head], key-major
    if bias is not None:
        prox.append(proximity(bias, y).reshape(1))
    la = att.index
    sources: list = [(la - 1, "out", i, "residual", None)]
    sources += [
        (la - 1, "out", int(j), "head", h) for j in keys.tolist() for h in range(len(att.f))
    ]
    if bias is not None:
        sources.append((None, None, None, "bias", None))
    return _Node(sources, torch.cat(prox))


def _out_node(la: int, i: int, mid: torch.Tensor, out: torch.Tensor) -> _Node:
    """Node (l, out, i): the state after attention (the residual) and the MLP's write."""
    parts = torch.stack([mid, out - mid])  # [2, d_model]
    sources = [(la, "mid", i, "residual", None), (la, "mid", i, "mlp", None)]
    return _Node(sources, proximity(parts, out))


def _kept(node: _Node, threshold: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(share, weight, kept) of a node's parts: proximities normalised over the node, those at
    most `threshold` dropped, the rest renormalised. [parts] each"""
    total = node.prox.sum()
    share = node.prox / total if total > 0 else torch.zeros_like(node.prox)
    kept = share > threshold
    left = share * kept
    weight = left / left.sum() if bool(kept.any()) else left
    return share, weight, kept


def _rows_of(dst: tuple[int, str, int], node: _Node, threshold: float, rows: list) -> set:
    """Append a node's kept parts as table rows; return their source nodes."""
    share, weight, kept = _kept(node, threshold)
    sources = set()
    for p in kept.nonzero().flatten().tolist():
        la, stage, pos, kind, head = node.sources[p]
        rows.append((*dst, la, stage, pos, kind, head, float(share[p]), float(weight[p])))
        if la is not None:
            sources.add((la, stage, pos))
    return sources


def _mids(att: _Attention, pos: list[int], states: torch.Tensor) -> torch.Tensor:
    """The mid states at positions `pos` of the attention's layer: its input plus its output as
    the model adds it (through the post-attention norm, times the multiplier). [len(pos), d]"""
    x_in = states[att.index, pos]  # [p, d_model]
    out = att.layer.stored("output")[pos].float().cpu()  # [p, d_model]
    return torch.stack([x_in[r] + att.reach(out[r], att.frozen(i)) for r, i in enumerate(pos)])


def node_parts(
    model: LoadedModel, trace: Trace, layer: int, position: int = -1, stage: str = "mid"
) -> tuple[torch.Tensor, list[tuple], torch.Tensor]:
    """One node's state [d_model], its parts' sources (src_layer, src_stage, src_pos, kind,
    head) and the parts themselves [parts, d_model], in flow_graph's order: for checking that a
    node's parts add up to it. Every key's part of every head is made at once (a short input)."""
    _check(model, trace, THRESHOLD)
    if stage not in ("mid", "out"):
        raise ValueError(f"stage={stage!r} must be 'mid' or 'out'")
    i = position_in(trace, position)
    states = read_states(model, trace)
    att = _attention(model, trace, layer)
    mid = _mids(att, [i], states)[0]
    if stage == "out":
        out = states[layer + 1, i]
        return out, _out_node(layer, i, mid, out).sources, torch.stack([mid, out - mid])
    alpha = _weight_rows(att.layer, [i])[:, 0]  # [head, n_k]
    frozen = att.frozen(i)
    node = _mid_node(att, i, alpha, states[layer, i], mid)
    keys = (alpha.amax(0) > 0).nonzero().flatten()
    heads = att.reach(alpha[:, keys].unsqueeze(-1) * att.f[:, keys], frozen)  # [head, keys, d]
    parts = [states[layer, i].unsqueeze(0), heads.transpose(0, 1).reshape(-1, heads.shape[-1])]
    if att.bias is not None:
        parts.append(att.reach(att.bias, frozen).unsqueeze(0))
    return mid, node.sources, torch.cat(parts)


def flow_graph(
    model: LoadedModel,
    trace: Trace,
    position: int = -1,
    threshold: float = THRESHOLD,
    progress: Callable[[float], None] | None = None,
) -> pd.DataFrame:
    """The information-flow routes to the state the model predicts from at `position` (-1: the
    last token): every edge whose share of its node passes `threshold`, reachable backwards from
    the last layer's output there (Ferrando & Voita 2024; the module docstring has the maths).

    One row an edge, from the source node (src_*) into the node it builds (dst_*): layer (-1:
    the embeddings), stage ("mid": after the layer's attention; "out": after the layer), pos;
    kind ("residual", "head", "mlp", or "bias": W_O's bias, with no source node), head (a head's
    row; else <NA>), share (the part's proximity over the node's, before the threshold) and
    weight (after it, renormalised: a node's kept rows add up to 1). attrs: position, threshold,
    tokens, n_layers, n_heads, model, nodes (how many the graph holds). `progress(f)` hears the
    fraction done (the rerun that reads the states, then the layers read downwards)."""
    import pandas as pd

    _check(model, trace, threshold)
    n_layers = len(decoder_layers(model))
    pos = position_in(trace, position)
    # the rerun and the layers read downwards: half the progress each
    half = None if progress is None else (lambda f: progress(f / 2))
    states = read_states(model, trace, half)  # [n_layers + 1, n, d_model]
    rows: list = []
    want_out = {pos}
    nodes = 0
    for la in range(n_layers - 1, -1, -1):
        att = _attention(model, trace, la)
        out_pos = sorted(want_out)
        mids = _mids(att, out_pos, states)  # [out_pos, d_model]
        want_mid: set[int] = set()
        mid_of = dict(zip(out_pos, range(len(out_pos)), strict=True))
        for r, i in enumerate(out_pos):
            node = _out_node(la, i, mids[r], states[la + 1, i])
            want_mid |= {p for _, _, p in _rows_of((la, "out", i), node, threshold, rows)}
        mid_pos = sorted(want_mid)
        want_out = set()
        for r0 in range(0, len(mid_pos), ROWS):
            chunk = mid_pos[r0 : r0 + ROWS]
            alpha = _weight_rows(att.layer, chunk)  # [head, rows, n_k]
            for r, i in enumerate(chunk):
                node = _mid_node(att, i, alpha[:, r], states[la, i], mids[mid_of[i]])
                found = _rows_of((la, "mid", i), node, threshold, rows)
                want_out |= {p for _, _, p in found}
        nodes += len(out_pos) + len(mid_pos)
        if progress is not None:
            progress(0.5 + (n_layers - la) / n_layers / 2)
    nodes += len(want_out)  # the embeddings reached
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in ("src_layer", "src_pos", "head"):
        table[col] = table[col].astype("Int64")
    table.attrs.update(
        position=pos,
        threshold=float(threshold),
        tokens=list(trace.tokens[: states.shape[1]]),
        n_layers=n_layers,
        n_heads=trace.layers[0].n_heads,
        model=model.name,
        nodes=nodes,
    )
    return table


def _depth(layer: int, stage: str) -> int:
    """A node's height in the graph: the embeddings 0, layer l's mid 2l + 1, its out 2l + 2."""
    return 2 * layer + (1 if stage == "mid" else 2)


def prune(graph: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """The graph flow_graph gives at a higher `threshold`, from one it gave at a lower one (a
    part's share does not depend on the threshold, and what a higher one reaches the lower one
    reached too): the rows whose share passes it, renormalised per node, reachable from the
    top. For a threshold slider that does not run the model again."""
    import pandas as pd

    if not 0 <= threshold < 1:
        raise ValueError(f"threshold={threshold} must be at least 0 and below 1 (default 0.04)")
    if threshold < graph.attrs.get("threshold", 0.0):
        raise ValueError(
            f"threshold={threshold} is below the graph's own ({graph.attrs['threshold']}): "
            "what it dropped is gone; run flow_graph again"
        )
    kept = graph[graph.share > threshold].copy()
    node = ["dst_layer", "dst_stage", "dst_pos"]
    kept["weight"] = kept.share / kept.groupby(node).share.transform("sum")
    depth = [_depth(la, s) for la, s in zip(kept.dst_layer, kept.dst_stage, strict=True)]
    kept = kept.assign(_depth=depth).sort_values("_depth", ascending=False, kind="stable")
    reached = {(graph.attrs["n_layers"] - 1, "out", graph.attrs["position"])}
    keep = []
    for dst, rows in kept.groupby(node, sort=False):
        if dst not in reached:
            continue
        keep.append(rows)
        edges = rows[rows.kind != "bias"]
        reached |= set(zip(edges.src_layer, edges.src_stage, edges.src_pos, strict=True))
    out = pd.concat(keep) if keep else kept.iloc[:0]
    out = out.drop(columns="_depth").sort_index()
    out.attrs = dict(graph.attrs, threshold=float(threshold))
    out.attrs["nodes"] = len(reached)
    return out
