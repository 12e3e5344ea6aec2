"""Reading a decoder's residual stream as next-token logits: each head's direct push on one token
(direct logit attribution) and the top tokens after every layer (the logit lens).

Direct logit attribution. The final state at a position is a sum of parts: the embeddings, each
head's output z_h W_O^h, each block's output bias, each MLP's output (everything else a layer adds:
its MLP after the layer's own norms). With the final norm's scale frozen at that position (RMSNorm:
the rms of the final residual; LayerNorm: its std, after centring) the norm is linear, so

    logit(part) = (P(part) / scale * weight) · U[token]

and the parts' logits, with the norm's bias and the unembedding's bias as rows of their own, add
up to the model's logit of `token` exactly (up to float rounding). Where a model puts a norm
between a block and the residual stream (Gemma 3 and OLMo 2 after attention; BART after every
sublayer) that norm is frozen the same way at its own input. A silenced head (what-if) writes
nothing: its row is 0. The states between layers are read by running the input again with the
trace's knobs (engine/hooked/stream.py); the heads' z come from the trace itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from attnviz.engine.hooked.families import CROSS, DECODER
from attnviz.engine.hooked.labels import piece_text
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.readout import (
    FrozenNorm,
    Unembed,
    attention_out_norm,
    block_of,
    decoder_layers,
    embedding_norm,
    final_norm,
    freeze,
    post_ln_norms,
    residual_multiplier,
    unembedding,
    w_o_bias,
    w_o_matrix,
)
from attnviz.engine.hooked.stream import Stream, read_stream
from attnviz.engine.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 64  # parts projected onto the whole vocabulary at once (64 x vocab float32)


@dataclass
class Part:
    """One additive part of the final residual state at the position. [d_model] float64"""

    kind: str  # embedding, head, attention bias, mlp, norm bias, unembedding bias
    part: str | None  # "decoder" or "cross" (an encoder-decoder's cross-attention) for heads
    layer: int | None
    head: int | None
    vector: torch.Tensor | None  # None: a logit given directly (the unembedding's bias)


def _attention_parts(
    model: LoadedModel, trace: Trace, part: str, layer: int, pos: int, mult: float
) -> list[Part]:
    """The heads' z_h W_O^h at the position and the output bias, as they reach the residual
    stream (through Gemma 3's or OLMo 2's post-attention norm, frozen at the block's output, and
    Granite's multiplier)."""
    block = block_of(model, part, layer)
    traced = (
        trace.part(part).layers[layer] if model.kind == "encoder-decoder" else trace.layers[layer]
    )
    z = traced.stored("z")[:, pos].double().cpu()  # [head, d_head]
    w = w_o_matrix(block).double().cpu()  # [head * d_head, d_model]
    d_head = z.shape[-1]
    writes = [z[h] @ w[h * d_head : (h + 1) * d_head] for h in range(z.shape[0])]  # [d_model]
    bias = w_o_bias(block)
    norm = attention_out_norm(model, decoder_layers(model)[layer])
    frozen = None if norm is None else freeze(norm, traced.stored("output")[pos].float())

    def reach(x: torch.Tensor) -> torch.Tensor:
        return (x if frozen is None else frozen.apply(x)) * mult

    parts = [Part("head", part, layer, h, reach(c)) for h, c in enumerate(writes)]
    if bias is not None:
        parts.append(Part("attention bias", part, layer, None, reach(bias.double().cpu())))
    return parts


def _total(parts: list[Part]) -> torch.Tensor:
    return torch.stack([p.vector for p in parts if p.vector is not None]).sum(0)


def _through(parts: list[Part], frozen: FrozenNorm, layer: int | None) -> list[Part]:
    """Every part through a frozen norm, and the norm's bias as a part of its own."""
    for p in parts:
        p.vector = frozen.apply(p.vector)
    if frozen.bias is not None:
        parts.append(Part("norm bias", None, layer, None, frozen.bias.clone()))
    return parts


def _norm_step(parts: list[Part], stream: Stream, name: str, norm, layer: int | None) -> None:
    """A post-LayerNorm step: the parts must add up to what entered the norm (else this model is
    not built as readout.py says), then each goes through it frozen."""
    want = stream.inputs[name].double()
    got = _total(parts)
    if (got - want).abs().max() > 1e-3 * (1 + want.abs().max()):
        raise ValueError(f"{name}: the parts do not add up to its input; unsupported layout")
    _through(parts, freeze(norm, stream.inputs[name]), layer)


def residual_parts(model: LoadedModel, trace: Trace, stream: Stream) -> list[Part]:
    """The parts of the state the unembedding reads at the stream's position, after the final
    norm (frozen) when the model has one; they add up to it."""
    pos, layers = stream.position, decoder_layers(model)
    mult = residual_multiplier(model)
    attention = [DECODER] + ([CROSS] if model.kind == "encoder-decoder" else [])
    first = stream.inputs["embedding_norm" if "embedding_norm" in stream.inputs else "layer0"]
    parts = [Part("embedding", None, None, None, first.double())]
    if "embedding_norm" in stream.inputs:  # BART: the embeddings' norm sits before layer 0
        _norm_step(parts, stream, "embedding_norm", embedding_norm(model), None)
    for i, layer in enumerate(layers):
        norms = post_ln_norms(model, layer)  # () for the pre-norm families
        start = len(parts)
        for j, part in enumerate(attention):
            parts += _attention_parts(model, trace, part, i, pos, mult)
            if norms:
                _norm_step(parts, stream, f"layer{i}.norm{j}", norms[j], i)
        if norms:  # post-LN: what entered the MLP's norm, less every part so far
            mlp = stream.inputs[f"layer{i}.norm{len(attention)}"].double() - _total(parts)
        else:  # pre-LN: how the layer changed the stream, less what its attention wrote
            change = stream.outputs[f"layer{i}"].double() - stream.inputs[f"layer{i}"].double()
            mlp = change - _total(parts[start:])
        parts.append(Part("mlp", None, i, None, mlp))
        if norms:
            _norm_step(parts, stream, f"layer{i}.norm{len(attention)}", norms[-1], i)
    norm = final_norm(model)
    if norm is not None:
        _through(parts, freeze(norm, stream.inputs["final_norm"]), None)
    return parts


def one_token(model: LoadedModel, logits: torch.Tensor, token, name: str = "token") -> int:
    """`token` as one token id: an id, one token's text (" tired", "Ġtired"), or None for the
    one these logits [vocab] make most likely; else a message naming what it is in pieces."""
    if token is None:
        return int(logits.argmax())
    vocab = logits.shape[0]
    if isinstance(token, int) and not isinstance(token, bool):
        if not 0 <= token < vocab:
            raise ValueError(f"{name}={token} is not a token id of this model (0..{vocab - 1})")
        return token
    if not isinstance(token, str) or not token:
        raise TypeError(f"{name} must be a token id, one token's text or None, not {token!r}")
    ids = _ids(model.tokenizer, token)
    if len(ids) == 1 and 0 <= ids[0] < vocab:
        return ids[0]
    found = "; ".join(f"{t!r} is {len(p)} token(s) {p}" for t, p in spellings(model, token).items())
    raise ValueError(f"{name}={token!r} is not one token: it is {len(ids)} tokens for this model "
                     f"({found}); a logit is one token's, so pass a word that is one")  # fmt: skip


def _ids(tok, text: str) -> list[int]:
    """The token ids of `text`: one where it is a piece as the vocabulary spells it ("Ġtired",
    "▁tired"), else what the tokenizer makes of it."""
    found = tok.convert_tokens_to_ids(text)
    if isinstance(found, int) and found != tok.unk_token_id:
        return [found]
    return tok.encode(text, add_special_tokens=False)


def spellings(model: LoadedModel, text: str) -> dict[str, list[str]]:
    """`text` and the same word with a leading space added (or its leading space taken off), each
    with the pieces this model makes of it, as text: a head pushes one token's logit, and
    "hungry" is 3 tokens for SmolLM2 ('h' 'ung' 'ry') where " hungry" is one."""
    other = text[1:] if text.startswith(" ") else " " + text
    tok = model.tokenizer
    return {
        t: [piece_text(tok, i) for i in _ids(tok, t)] for t in dict.fromkeys((text, other)) if t
    }


def _tops(vectors: list[torch.Tensor | None], unembed: Unembed, k: int) -> list[tuple]:
    """Each part's k most promoted and k most suppressed token ids (empty for a part that writes
    nothing, or is a logit given directly)."""
    out: list[tuple] = [((), ())] * len(vectors)
    live = [i for i, v in enumerate(vectors) if v is not None and bool(v.abs().max() > 0)]
    for c0 in range(0, len(live), CHUNK):
        idx = live[c0 : c0 + CHUNK]
        logits = unembed.linear(torch.stack([vectors[i] for i in idx]).float())  # [c, vocab]
        up = logits.topk(k, dim=-1).indices.tolist()
        down = logits.topk(k, dim=-1, largest=False).indices.tolist()
        for j, i in enumerate(idx):
            out[i] = (tuple(up[j]), tuple(down[j]))
    return out


def head_logits(
    model: LoadedModel, trace: Trace, position: int = -1, token: int | str | None = None, k: int = 3
) -> pd.DataFrame:
    """Direct logit attribution: each head's push on `token`'s logit at `position` (-1: the last
    token; default token: the model's most likely next one), with the rest of the final state
    as rows, so that the `logit` column adds up to the model's logit (before a softcap).

    For head h: logit = (P(z_h W_O^h) / s * w) · U[token], with z_h the head's output at the
    position (from the trace, so a silenced head gives 0), W_O^h its rows of the output
    projection, s the final norm's scale frozen at the position (RMSNorm: rms of the final
    residual; LayerNorm: its std, P centring), w the norm's weight and U the unembedding.
    Columns: part ("decoder", or "cross" for an encoder-decoder's cross-attention), kind
    (embedding, head, attention bias, mlp, norm bias, unembedding bias), layer and head
    (nullable: a row without one has <NA>), logit, promote_1..k and suppress_1..k (the tokens
    each row raises and lowers most; empty for a row that writes nothing), target (the token)
    and position. `attrs`: target_id, model_logit (the model's own), softcap."""
    import pandas as pd

    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k={k!r} must be a whole number of tokens, at least 1")
    stream = read_stream(model, trace, position)
    target = one_token(model, stream.logits, token)
    unembed = unembedding(model)
    parts = residual_parts(model, trace, stream)
    bias = unembed.bias_logits()
    if bias is not None:
        parts.append(Part("unembedding bias", None, None, None, None))
    u = unembed.row(target)  # [d_model]
    tops = _tops([p.vector for p in parts], unembed, min(k, stream.logits.shape[0]))
    tok = model.tokenizer
    name = piece_text(tok, target)
    rows = []
    for p, (up, down) in zip(parts, tops, strict=True):
        row = {
            "part": p.part,
            "kind": p.kind,
            "layer": p.layer,
            "head": p.head,
            "logit": float(bias[target]) if p.vector is None else float(p.vector @ u),
        }
        for i in range(k):
            row[f"promote_{i + 1}"] = piece_text(tok, up[i]) if i < len(up) else ""
        for i in range(k):
            row[f"suppress_{i + 1}"] = piece_text(tok, down[i]) if i < len(down) else ""
        rows.append(row | {"target": name, "position": stream.position})
    table = pd.DataFrame(rows)
    table[["layer", "head"]] = table[["layer", "head"]].astype("Int64")
    table.attrs.update(
        target_id=target,
        model_logit=float(stream.logits[target]),
        softcap=unembed.softcap,
    )
    return table


def logit_lens(model: LoadedModel, trace: Trace, position: int = -1, k: int = 5) -> pd.DataFrame:
    """The logit lens: the residual stream at `position` after each layer, read through the final
    norm (each state's own scale, as the model normalises its last one) and the unembedding.

    Columns: layer (-1: the embeddings, before layer 0), top_1..top_k (the k most likely tokens
    read there) and p_1..p_k (their probabilities), final_token (the model's most likely next
    token), final_p and final_rank (its probability and rank at this layer). The last row is the
    model's own prediction.

    final_rank counts the logits above the token's, plus 1 (a tie shares the better rank), on
    the logits, not the probabilities: float32's softmax rounds most of a vocabulary to exactly 0
    where one token dominates (48,530 of SmolLM2's 49,152 at its embeddings), and counting
    probabilities then ranked the token among the few that were not 0 (623, not 12,919)."""
    import pandas as pd

    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k={k!r} must be a whole number of tokens, at least 1")
    stream = read_stream(model, trace, position)
    unembed = unembedding(model)
    norm = final_norm(model)
    n_layers = len(decoder_layers(model))
    states = [stream.inputs["layer0"]] + [stream.outputs[f"layer{i}"] for i in range(n_layers)]
    param = next(model.model.parameters())
    x = torch.stack(states).to(param.device, param.dtype)  # [layer + 1, d_model]
    with torch.inference_mode():
        logits = unembed.logits(x if norm is None else norm(x)).float().cpu()  # [layer + 1, vocab]
    probs = torch.softmax(logits, dim=-1)  # [layer + 1, vocab]
    final = int(stream.logits.argmax())
    k = min(k, probs.shape[-1])
    top = probs.topk(k, dim=-1)
    tok = model.tokenizer
    rows = []
    for i in range(n_layers + 1):
        row = {"layer": i - 1}
        row |= {f"top_{j + 1}": piece_text(tok, int(top.indices[i, j])) for j in range(k)}
        row |= {f"p_{j + 1}": float(top.values[i, j]) for j in range(k)}
        row |= {
            "final_token": piece_text(tok, final),
            "final_p": float(probs[i, final]),
            "final_rank": int((logits[i] > logits[i, final]).sum()) + 1,
        }
        rows.append(row)
    return pd.DataFrame(rows)
