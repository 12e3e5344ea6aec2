"""Preparing a TraceRequest for a forward: checked, tokenized once and weighed (the bytes of its
full trace), so that whoever decides which requests share a forward (a server's batcher,
`trace_each`) and the forward itself read the same tokens."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from attnviz.engine import validate
from attnviz.engine.budget import longest_input, model_trace_bytes
from attnviz.engine.hooked.encoding import decoder_inputs, encode
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.request import TraceRequest


@dataclass(frozen=True, eq=False)
class Prepared:
    """A request tokenized once: the encoded input ([1, n] each; an encoder-decoder's decoder
    input in `dec`), its length before any cut, the token limit it was cut to, and the bytes of
    its full trace (what a batch of them weighs)."""

    request: TraceRequest
    enc: dict[str, torch.Tensor]
    n_input: int
    dec: dict[str, torch.Tensor] | None
    limit: int
    n_bytes: int

    @property
    def n_tokens(self) -> int:
        return self.enc["input_ids"].shape[1]


def check_heads(model: LoadedModel, ablate: Iterable[tuple[int, int]]) -> None:
    for layer, head in sorted(ablate):
        n_heads = model.blocks[layer].n_heads if 0 <= layer < len(model.blocks) else model.n_heads
        if not (0 <= layer < model.n_blocks and 0 <= head < n_heads):
            raise ValueError(
                f"ablate=({layer}, {head}) is outside the model: layers 0..{model.n_blocks - 1}, "
                f"heads 0..{model.n_heads - 1}"
            )


def limit_for(model: LoadedModel, limit: int, max_length: object, batch: int) -> int:
    """The default limit: as many tokens as this server's budget lets `batch` inputs trace."""
    return min(limit, longest_input(model, batch)) if max_length is None else limit


def prepare(model: LoadedModel, request: TraceRequest) -> Prepared:
    """The request checked, tokenized (once) and weighed. Its knobs are checked against the
    model here; its text is cut to the limit (the trace says so)."""
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), not {type(model).__name__}")
    if not isinstance(request, TraceRequest):
        raise TypeError(f"request must be a TraceRequest, not {type(request).__name__}")
    pairs = None if request.pair is None else [request.pair]
    texts, pairs, limit = validate.model_inputs(model, [request.text], pairs, request.max_length, 1)
    limit = limit_for(model, limit, request.max_length, 1)
    check_heads(model, request.knobs.ablate)
    enc, n_input, dec = encoded(model, texts, pairs, limit)
    n_all = enc["input_ids"].shape[1] + (0 if dec is None else dec["input_ids"].shape[1])
    n_bytes = model_trace_bytes(model.n_layers, model.n_heads, model.d_head, 1, n_all)
    return Prepared(request, enc, n_input[0], dec, limit, n_bytes)


def encoded(model: LoadedModel, texts: list[str], pairs: list[str] | None, limit: int):
    """The tokenized batch, each input's length before a cut, and an encoder-decoder's decoder
    input (its second texts, or the texts themselves; None for any other model)."""
    if model.kind == "encoder-decoder":
        enc, n_input = encode(model, texts, None, limit)
        return enc, n_input, decoder_inputs(model, pairs or texts, limit)
    enc, n_input = encode(model, texts, pairs, limit)
    return enc, n_input, None


def batches_texts(model: LoadedModel) -> bool:
    """Whether several texts can run through `model` as one padded batch and each trace be cut
    to its own positions unchanged: an encoder whose tokenizer pads on the right, or a causal
    decoder (padded on the right by `collate`, whatever its tokenizer does: a position never
    sees a later one, so the padding after a text changes nothing of it)."""
    if model.kind == "decoder":
        return True
    return model.kind == "encoder" and model.call_tokenizer.padding_side == "right"


def may_share(model: LoadedModel, item: Prepared) -> bool:
    """Whether this prepared request may share a forward with others of its `request.group`:
    the model batches texts, and nothing but the text differs (no second sentence, no hidden
    tokens, which change the inputs)."""
    request = item.request
    return batches_texts(model) and request.pair is None and not request.knobs.changes_inputs


def groups(model: LoadedModel, items: Sequence[Prepared], most: int) -> list[list[int]]:
    """Indices of `items` in forwards of at most `most` trace bytes: shortest first, so that a
    batch pads little; an item over `most` on its own, or one that may not share, goes alone."""
    out: list[list[int]] = []
    order = sorted(range(len(items)), key=lambda i: items[i].n_tokens)
    for i in order:
        grown = len(out[-1]) + 1 if out else 0  # the last batch's size with this input
        fits = (
            grown
            and may_share(model, items[i])
            and may_share(model, items[out[-1][0]])
            and model_trace_bytes(
                model.n_layers, model.n_heads, model.d_head, grown, items[i].n_tokens
            )
            <= most
        )
        if fits:
            out[-1].append(i)
        else:
            out.append([i])
    return out
