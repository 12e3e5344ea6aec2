"""The residual stream of a traced decoder input at one position: the input run again through its
model, with the trace's what-if knobs, while forward hooks read what enters and leaves each layer
and norm at that position (a trace keeps the attention tensors, not the states between layers).

The hooks live for one call and act only in the thread that registered them, so another session
running the same cached model meanwhile is neither recorded nor slowed beyond a function call.
Attention runs lean (no n x n tensor), as a long trace does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from attnviz.engine.hooked.families import DECODER
from attnviz.engine.hooked.hooks import forward_hook
from attnviz.engine.hooked.intercept import Call
from attnviz.engine.hooked.labels import token_labels
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.readout import (
    decoder_layers,
    embedding_norm,
    final_norm,
    needs_head,
    post_ln_norms,
)
from attnviz.engine.request import Knobs
from attnviz.engine.trace import Trace


@dataclass
class Stream:
    """What entered (`inputs`) and left (`outputs`) each module at one position, float32 CPU
    [d_model] each, by name: "layer{i}" (decoder layer i), "final_norm", and for post-LayerNorm
    models "embedding_norm" and "layer{i}.norm{j}". `logits`: the model's own logits there."""

    position: int  # in the decoder's tokens (an encoder-decoder's `trace.part("decoder")`)
    tokens: list[str]  # the decoder's tokens up to the last real one (padding dropped)
    logits: torch.Tensor | None = None  # [vocab]
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)


def decoder_part(model: LoadedModel, trace: Trace) -> Trace:
    """The trace whose queries are the tokens the next-token head reads."""
    return trace.part(DECODER) if model.kind == "encoder-decoder" else trace


def _real_length(trace: Trace) -> int:
    pads = trace.special.get("[PAD]", [])
    return len(trace.tokens) - len(pads)  # padding is on the right


def position_in(trace: Trace, position: int) -> int:
    """`position` (negative counts from the last real token) as an index, checked."""
    n = _real_length(trace)
    if isinstance(position, bool) or not isinstance(position, int):
        raise TypeError(f"position must be an int, not {type(position).__name__}")
    pos = position + n if position < 0 else position
    if not 0 <= pos < n:
        raise ValueError(f"position={position} is outside the {n} tokens of this input")
    return pos


def _ids(model: LoadedModel, trace: Trace, n: int) -> torch.Tensor:
    """The ids of a trace's first `n` tokens: those tracing kept, else read back from the tokens
    (a trace without them: its tokens must be the vocabulary's own pieces). [1, n]"""
    tokens = trace.tokens[:n]
    ids = trace.token_ids[:n] if trace.token_ids is not None else None
    if ids is None:
        ids = model.tokenizer.convert_tokens_to_ids(tokens)
        if any(i is None for i in ids) or model.tokenizer.convert_ids_to_tokens(ids) != tokens:
            ids = None
    elif token_labels(model.tokenizer, ids) != tokens:
        ids = None
    if ids is None:
        raise ValueError(f"this trace's tokens are not {model.name!r}'s: trace it with this model")
    return torch.tensor([ids])


def _knobs(model: LoadedModel, trace: Trace) -> Knobs:
    """The what-if knobs the trace was made with, for a lean rerun."""
    meta = trace.meta
    hide_in = None
    if model.kind == "encoder-decoder":  # as tracing does: source tokens hidden from the encoder
        hide_in = frozenset(i for i, b in enumerate(model.blocks) if b.part != DECODER)
    return Knobs(
        use_scale=meta.get("use_scale", True),
        temperature=meta.get("temperature", 1.0),
        ablate=frozenset(tuple(pair) for pair in meta.get("ablate", ())),
        mask_tokens=tuple(meta.get("mask_tokens", ())),
        hide_in=hide_in,
        lean=True,
    )


def _modules(model: LoadedModel) -> dict[str, Any]:
    """The modules whose input and output at the position make the stream, by name."""
    mods: dict[str, Any] = {}
    emb = embedding_norm(model)
    if emb is not None:
        mods["embedding_norm"] = emb
    for i, layer in enumerate(decoder_layers(model)):
        mods[f"layer{i}"] = layer
        for j, norm in enumerate(post_ln_norms(model, layer)):
            mods[f"layer{i}.norm{j}"] = norm
    norm = final_norm(model)
    if norm is not None:
        mods["final_norm"] = norm
    return mods


def _first(value: Any) -> torch.Tensor:
    return value[0] if isinstance(value, tuple) else value


@contextmanager
def _hooks(mods: dict[str, Any], at: torch.Tensor, streams: list[Stream]) -> Iterator[None]:
    """Read what enters and leaves each module at position at[b] of batch row b into
    streams[b], for forwards in this thread only."""
    me = threading.get_ident()
    rows = torch.arange(len(streams))

    def hook(name: str):
        def read(module, args, kwargs, output) -> None:
            if threading.get_ident() != me:  # another session's forward of the same model
                return
            x = args[0] if args else kwargs["hidden_states"]  # [batch, n, d_model]
            y = _first(output)  # [batch, n, d_model]
            pick = (rows.to(x.device), at.to(x.device))
            x, y = (
                x[pick].detach().to("cpu", torch.float32),
                y[pick].detach().to("cpu", torch.float32),
            )
            for b, stream in enumerate(streams):  # [batch, d_model] -> [d_model] each
                stream.inputs[name], stream.outputs[name] = x[b], y[b]

        return read

    handles = [forward_hook(m, hook(n)) for n, m in mods.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def recording(model: LoadedModel, last: torch.Tensor) -> Iterator[list[Stream]]:
    """Around the tracing forward of a batch: the residual stream of each row at its last real
    decoder token (last[b]), read on the way, so that head_logits and the logit lens of that
    position need no second run of the model (a long input's costs as much as tracing it).
    Yields one Stream a row (to finish with `keep_stream`), or none for a model without a head."""
    try:
        needs_head(model)
    except ValueError:
        yield []
        return
    streams = [Stream(position=int(p), tokens=[]) for p in last.tolist()]
    with _hooks(_modules(model), last, streams):
        yield streams


def keep_stream(model: LoadedModel, trace: Trace, stream: Stream, logits: torch.Tensor) -> None:
    """Keep a stream read while tracing on the trace (the memo read_stream looks in), with the
    model's logits there. [vocab]"""
    dec = decoder_part(model, trace)
    if stream.position != _real_length(dec) - 1 or not stream.inputs:
        return  # not the last real token as read_stream counts it: left to a rerun
    stream.tokens = dec.tokens[: stream.position + 1]
    stream.logits = logits
    trace.memo[("stream", model.key, stream.position)] = stream


def read_stream(model: LoadedModel, trace: Trace, position: int = -1) -> Stream:
    """Run the trace's input through `model` again (its knobs, lean attention) and read the
    residual stream at `position` of the decoder's tokens (-1: the last real one)."""
    needs_head(model)
    if trace.source != model.name:
        raise ValueError(f"this trace comes from {trace.source!r}, not from {model.name!r}")
    if model.kind == "encoder-decoder" and trace.meta.get("part", "encoder") != "encoder":
        raise ValueError(
            "pass the trace trace_model returned (the encoder's, with its decoder and cross parts),"
            " not one of its parts: the rerun needs the encoder's tokens too"
        )
    dec = decoder_part(model, trace)
    pos = position_in(dec, position)
    # kept on the trace while it lives (a few d_model vectors a layer): head_logits and the logit
    # lens of one position read it from one rerun, the views one after the other; the last
    # token's was read while tracing (`recording`)
    key = ("stream", model.key, pos)
    if key not in trace.memo:
        trace.memo[key] = _read(model, trace, dec, pos)
    return trace.memo[key]


def _read(model: LoadedModel, trace: Trace, dec: Trace, pos: int) -> Stream:
    n = _real_length(dec)
    stream = Stream(position=pos, tokens=dec.tokens[:n])
    dev = torch.device(model.device)
    inputs = {"input_ids": _ids(model, dec, n).to(dev)}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    if model.kind == "encoder-decoder":
        enc_ids = _ids(model, trace, _real_length(trace)).to(dev)
        inputs = {
            "input_ids": enc_ids,
            "attention_mask": torch.ones_like(enc_ids),
            "decoder_input_ids": inputs["input_ids"],
            "decoder_attention_mask": inputs["attention_mask"],
        }
    with torch.inference_mode(), _hooks(_modules(model), torch.tensor([pos]), [stream]):
        out = model.model(
            **inputs,
            attnviz_call=Call(_knobs(model, trace)),
            logits_to_keep=torch.tensor([pos], device=dev),
        )
    logits = out.logits[0]  # [1 or n, vocab]: BART's head ignores logits_to_keep
    stream.logits = logits[-1 if len(logits) == 1 else pos].detach().to("cpu", torch.float32)
    return stream


def read_states(
    model: LoadedModel, trace: Trace, progress: Callable[[float], None] | None = None
) -> torch.Tensor:
    """Run a decoder-only trace's input through `model` again (its knobs, lean attention) and
    keep the residual stream at every position between layers: what enters layer 0 (the
    embeddings) and what leaves each layer, float32 CPU. [n_layers + 1, n, d_model]

    For the information-flow graph (measures/flow.py), which needs a node's state wherever the
    graph reaches; held as one tensor, 31 x n x 576 floats on SmolLM2 (292 MB at 4,096 tokens).
    `progress(f)` hears the fraction of layers run."""
    if trace.source != model.name:
        raise ValueError(f"this trace comes from {trace.source!r}, not from {model.name!r}")
    if model.kind != "decoder":
        raise ValueError(f"{model.name!r} is an {model.kind}: its states are not read here")
    n = _real_length(trace)
    layers = decoder_layers(model)
    states: torch.Tensor | None = None
    me = threading.get_ident()

    def keep(i: int):
        def read(module, args, kwargs, output) -> None:
            nonlocal states
            if threading.get_ident() != me:  # another session's forward of the same model
                return
            y = _first(output)[0, :n].detach()  # [n, d_model]
            if states is None:
                states = torch.empty(len(layers) + 1, n, y.shape[-1])  # [layer + 1, n, d_model]
            if i == 0:
                x = args[0] if args else kwargs["hidden_states"]  # [1, n, d_model]
                states[0] = x[0, :n].detach().to("cpu", torch.float32)
            states[i + 1] = y.to("cpu", torch.float32)
            if progress is not None:
                progress((i + 1) / len(layers))

        return read

    dev = torch.device(model.device)
    ids = _ids(model, trace, n).to(dev)
    handles = [forward_hook(m, keep(i)) for i, m in enumerate(layers)]
    try:
        with torch.inference_mode():
            model.model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                attnviz_call=Call(_knobs(model, trace)),
                logits_to_keep=1,
            )
    finally:
        for handle in handles:
            handle.remove()
    return states
