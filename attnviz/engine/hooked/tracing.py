"""Tracing: run a loaded model once with the recorder and knobs, and build one Trace per input.

A trace starts as a TraceRequest (attnviz.engine.request). `prepare` tokenizes it once and
weighs it (the bytes of its full trace); `trace_batch(model, requests)` runs requests that may
share a forward (`may_share`) as one padded batch and cuts each trace to its own tokens. Which
requests go together is the caller's decision (a server's batcher, or `trace_each`): the engine
does no regrouping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from attnviz.engine import validate
from attnviz.engine.budget import (
    budget,
    check_model_trace,
    lean_trace,
)
from attnviz.engine.errors import EmptyInput
from attnviz.engine.hooked.encoding import collate, special_positions
from attnviz.engine.hooked.families import CROSS, DECODER, POST_LN
from attnviz.engine.hooked.intercept import Recording, active, catch_outputs
from attnviz.engine.hooked.labels import token_labels
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.preparing import (
    Prepared,
    check_heads,
    encoded,
    groups,
    limit_for,
    may_share,
    prepare,
)
from attnviz.engine.hooked.readout import block_output, w_o_gram_of, w_o_matrix
from attnviz.engine.hooked.stream import keep_stream, recording
from attnviz.engine.lean import lean_scores, lean_weights
from attnviz.engine.request import Knobs, TraceRequest
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.engine.writes import key_norms


def trace_batch(
    model: LoadedModel,
    requests: Sequence[TraceRequest | Prepared] | Sequence[str],
    text_pairs: Sequence[str | None] | None = None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    mask_tokens: Iterable[int] = (),
    max_length: int | None = None,
) -> list[Trace]:
    """One Trace per request, each what `trace_model` gives for it. Requests (or Prepared ones)
    of one group that `may_share` run as one padded forward, each trace cut to its own tokens;
    otherwise each runs alone. Which requests to put together is the caller's choice.

    Plain texts (the older form, with the knobs as keywords) run as one padded batch whose traces
    keep the padding: padded to the longest, pad positions in `special["[PAD]"]` and masked (they
    get weight exactly 0)."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        raise TypeError(f"texts must be a list of sentences, not {type(requests).__name__}")
    requests = list(requests)
    if requests and all(isinstance(r, (TraceRequest, Prepared)) for r in requests):
        items = [r if isinstance(r, Prepared) else prepare(model, r) for r in requests]
        shared = len(items) > 1 and all(may_share(model, i) for i in items)
        if shared and len({i.request.group for i in items}) == 1:
            return _run_prepared(model, items)
        return [t for item in items for t in _run_prepared(model, [item])]
    return _padded(model, requests, text_pairs, use_scale, temperature, ablate, mask_tokens,
                   max_length)  # fmt: skip


def _padded(model, texts, text_pairs, use_scale, temperature, ablate, mask_tokens, max_length):
    """trace_batch's older form: texts with shared knobs as one padded batch, padding kept."""
    texts, pairs, limit = validate.model_inputs(model, texts, text_pairs, max_length)
    limit = limit_for(model, limit, max_length, len(texts))
    knobs = Knobs.checked(use_scale, temperature, ablate, mask_tokens)
    check_heads(model, knobs.ablate)
    if pairs is not None and any(p is not None for p in pairs):
        if len(pairs) != len(texts) or not all(pairs):
            raise ValueError("text_pairs needs one non-empty second sentence per text")
    else:
        pairs = None
    enc, n_input, dec = encoded(model, texts, pairs, limit)
    return _run(model, _Forward(enc, n_input, dec, knobs, limit))


def _run_prepared(model: LoadedModel, items: list[Prepared]) -> list[Trace]:
    """The traces of prepared requests run as one forward (one of them, or several that share)."""
    first = items[0]
    enc = first.enc if len(items) == 1 else collate(model, [i.enc for i in items])
    forward = _Forward(enc, [i.n_input for i in items], first.dec, first.request.knobs,
                       first.limit, trim=len(items) > 1)  # fmt: skip
    traces = _run(model, forward)
    for item, trace in zip(items, traces, strict=True):
        trace.request = item.request
        for part in trace.parts.values():
            part.request = item.request
    return traces


def trace_each(
    model: LoadedModel,
    texts: Sequence[str],
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    max_length: int | None = None,
    batch_bytes: int | None = None,
) -> list[Trace]:
    """One Trace per text, each what `trace_model(model, text, ...)` gives (its own tokens, no
    padding; equal up to float rounding), computed in as few padded forwards as the trace budget
    allows: for a notebook or script with many sentences. Eight 32-token sentences through
    MiniLM as one batch take about half the time of eight forwards (bench/hooked.py). Only where
    batches_texts(model); any other model traces one text at a time. `batch_bytes`: at most this
    many bytes of trace tensors in one forward (default and most: the trace budget); an input
    over it goes alone."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a list of sentences, not {type(texts).__name__}")
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), not {type(model).__name__}")
    texts = list(texts)
    if not texts:
        raise EmptyInput("texts is empty: give at least one sentence")
    knobs = Knobs.checked(use_scale, temperature, ablate)
    items = [prepare(model, TraceRequest(model.key, t, None, knobs, max_length)) for t in texts]
    most = min(budget().max_trace_bytes, batch_bytes or budget().max_trace_bytes)
    out: dict[int, Trace] = {}
    for group in groups(model, items, most):
        for j, trace in zip(group, trace_batch(model, [items[j] for j in group]), strict=True):
            out[j] = trace
    return [out[j] for j in range(len(items))]


@dataclass(frozen=True, eq=False)
class _Forward:
    """One forward's tokenized batch and settings. `trim`: each trace cut to its own tokens
    (right padding, no decoder), with tensors of its own."""

    enc: dict[str, torch.Tensor]
    n_input: list[int]
    dec: dict[str, torch.Tensor] | None
    knobs: Knobs
    limit: int
    trim: bool = False


def limit_reason(model: LoadedModel, limit: int) -> str:
    """Why inputs stop at `limit` tokens: "model" (its context), "tokens" (ATTNVIZ_MAX_TOKENS) or
    "budget" (the trace's bytes or work on this server)."""
    if limit >= model.max_length:
        return "model"
    return "tokens" if limit >= budget().max_tokens else "budget"


def _run(model: LoadedModel, forward: _Forward) -> list[Trace]:
    """The forward and the traces of a tokenized batch."""
    enc, n_input, dec, trim = forward.enc, forward.n_input, forward.dec, forward.trim
    n = enc["input_ids"].shape[1]
    n_all = n + (0 if dec is None else dec["input_ids"].shape[1])
    check_model_trace(model, len(n_input), n_all)  # the input's real length, not the limit
    masked = forward.knobs.mask_tokens
    if masked and not masked[-1] < n:
        raise ValueError(f"mask_tokens={list(masked)} must be token positions 0..{n - 1}")
    hide_in = None
    if dec is not None:  # mask_tokens are source tokens: hidden from encoder and cross blocks
        hide_in = frozenset(i for i, b in enumerate(model.blocks) if b.part != DECODER)
    knobs = replace(forward.knobs, hide_in=hide_in, lean=lean_trace(model, len(n_input), n_all))
    record = Recording(blocks={id(b.attention): i for i, b in enumerate(model.blocks)})
    dev = torch.device(model.device)
    inputs = {k: v.to(dev) for k, v in enc.items() if k != "special_tokens_mask"}
    if model.kind != "encoder":  # decoders take no segment ids (GPT-2 would embed them)
        inputs = {k: inputs[k] for k in ("input_ids", "attention_mask")}
    if model.kind == "decoder" and bool(enc["attention_mask"].all()):
        # Without padding every input ends at the last position: only its logits are kept
        # ([batch, 1, vocab] instead of [batch, n, vocab], 256 MiB for a 128k vocabulary at 512).
        inputs["logits_to_keep"] = 1
    if dec is not None:
        inputs["decoder_input_ids"] = dec["input_ids"].to(dev)
        inputs["decoder_attention_mask"] = dec["attention_mask"].to(dev)
    catch_outputs(b.w_o for b in model.blocks)
    real_last = (dec or enc)["attention_mask"].sum(-1) - 1  # [batch] last real token
    with torch.inference_mode(), recording(model, real_last) as streams:
        with active(record):
            out = model.model(
                **inputs,
                output_hidden_states=model.kind != "encoder" or model.model_type in POST_LN,
                attnviz_knobs=knobs,
                attnviz_record=record,
            )
        if model.kind == "encoder":
            hidden = out.last_hidden_state  # [batch, n, d_model]
        elif model.kind == "decoder":
            hidden = out.hidden_states[-1]  # [batch, n, d_model]
        else:
            hidden = out.encoder_last_hidden_state  # [batch, n, d_model]
        keep = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [batch, n, 1]
        embedding = (hidden * keep).sum(1) / keep.sum(1).clamp_min(1e-9)  # [batch, d_model]
        outputs = [block_output(block, record, i) for i, block in enumerate(model.blocks)]
        for i, block in enumerate(model.blocks):  # what each key sends through each head
            rec = record.layers[i]
            gram = w_o_gram_of(block, rec["v"].device)  # [head, d_head, d_head]
            rec["f_norm"] = key_norms(
                rec["v"], w_o_matrix(block), block.n_heads, knobs.heads_off(i), gram
            )
        dec_hidden = dec_embedding = None
        if dec is not None:
            dec_hidden = out.decoder_hidden_states[-1]  # [batch, m, d_model]
            dec_keep = inputs["decoder_attention_mask"].unsqueeze(-1).to(dec_hidden.dtype)
            dec_embedding = (dec_hidden * dec_keep).sum(1) / dec_keep.sum(1)  # [batch, d_model]
        next_logits = None
        if model.kind != "encoder":
            last = (dec or enc)["attention_mask"].sum(-1).to(dev) - 1  # [batch]
            if "logits_to_keep" in inputs:
                last = torch.zeros_like(last)  # [batch] the one position kept
            rows = torch.arange(last.shape[0], device=dev)  # [batch]
            next_logits = out.logits[rows, last]  # [batch, vocab] the logits after the last token

    on_cpu = dev.type == "cpu" and hidden.dtype == torch.float32

    def cpu(t: torch.Tensor) -> torch.Tensor:
        return t if on_cpu else t.to("cpu", torch.float32)

    def own(t: torch.Tensor) -> torch.Tensor:
        # A trimmed trace of a batch owns its tensors: a view would keep the whole batch alive
        # (and a byte-bounded cache would count only the view).
        return t.clone() if trim and len(n_input) > 1 else t

    meta = {
        "device": model.device,
        "use_scale": knobs.use_scale,
        "temperature": knobs.temperature,
        "ablate": sorted(knobs.ablate),
        "mask_tokens": list(masked),
        "max_length": forward.limit,
        "lean": knobs.lean,
        "limit_reason": limit_reason(model, forward.limit),
        "model_type": model.model_type,
        "kind": model.kind,
        "embedding": "mean-pooled over the attention mask, not L2-normalised",
    }
    traces = []
    for b, ids in enumerate(enc["input_ids"].tolist()):
        masks: list[torch.Tensor] = []  # distinct masks, so layers with the same one share it
        attention = enc["attention_mask"][b].tolist()
        n_b = sum(attention) if trim else n  # trimmed: this input's own tokens (right padding)
        ids, attention = ids[:n_b], attention[:n_b]

        def layer_traces(part: str, n_q: int, n_k: int, b: int = b, masks=masks) -> list:
            return _layer_traces(model, record, out, outputs, cpu, own, masks, part, b, n_q, n_k)

        first = model.blocks[0].part
        tokens = token_labels(model.tokenizer, ids)  # byte pieces read as characters
        types = enc["token_type_ids"][b, :n_b].tolist() if "token_type_ids" in enc else [0] * n_b
        trace = Trace(
            tokens=tokens,
            layers=layer_traces(first, n_b, n_b),
            source=model.name,
            truncated=n_input[b] > sum(attention),
            n_input_tokens=n_input[b],
            token_types=types,
            special=special_positions(model, ids, attention),
            hidden=own(cpu(hidden[b, :n_b])),  # [n, d_model]
            embedding=own(cpu(embedding[b])),  # [d_model]
            meta=dict(meta, part=first, first_layer=0),
            token_ids=ids,
        )
        if model.kind == "decoder":
            trace.next_logits = cpu(next_logits[b])  # [vocab]
        if dec is not None:
            d_ids = dec["input_ids"][b].tolist()
            m = len(d_ids)
            d_tokens = token_labels(model.tokenizer, d_ids)
            d_special = special_positions(model, d_ids, dec["attention_mask"][b].tolist())
            for part, keys in ((DECODER, None), (CROSS, tokens)):
                trace.parts[part] = Trace(
                    tokens=d_tokens,
                    key_tokens=keys,
                    layers=layer_traces(part, m, n if keys else m),
                    source=model.name,
                    special=d_special if keys is None else trace.special,
                    hidden=cpu(dec_hidden[b]),  # [m, d_model] the decoder's final states
                    embedding=cpu(dec_embedding[b]),  # [d_model]
                    next_logits=cpu(next_logits[b]),  # [vocab]
                    meta=dict(meta, part=part, first_layer=_first(model, part)),
                    token_ids=d_ids,
                )
        if streams:  # the last token's residual stream, read during the forward
            keep_stream(model, trace, streams[b], cpu(next_logits[b]))
        traces.append(trace)
    return traces


def _layer_traces(
    model: LoadedModel,
    record: Recording,
    out,
    outputs: list[torch.Tensor],
    cpu: Callable[[torch.Tensor], torch.Tensor],
    own: Callable[[torch.Tensor], torch.Tensor],
    masks: list[torch.Tensor],
    part: str,
    b: int,
    n_q: int,
    n_k: int,
) -> list[LayerTrace]:
    """One LayerTrace per block of `part`, for batch item b, its first n_q queries and n_k keys
    (all of them unless trimmed); equal masks become one tensor.

    The tensors stay where the model computed them (a GPU, bfloat16): LayerTrace converts on
    access (attnviz.engine.trace), so a view copies to the CPU only what it draws."""
    layers = []
    for i, block in enumerate(model.blocks):
        if block.part != part:
            continue
        rec = record.layers[i]
        x = None
        if model.model_type in POST_LN and out.hidden_states is not None:
            x = own(out.hidden_states[block.layer][b, :n_q])  # [n_q, d_model]
        common = dict(
            q=own(rec["q"][b, :, :n_q]),  # [head, n_q, d_head]
            k=own(rec["k"][b, :, :n_k]),  # [kv_head, n_k, d_head]
            v=own(rec["v"][b, :, :n_k]),  # [kv_head, n_k, d_head]
            scale=float(rec["scale"]),
            z=own(rec["z"][b, :, :n_q]),  # [head, n_q, d_head]
            output=own(outputs[i][b, :n_q]),  # [n_q, d_model]
            x=x,
            f_norm=own(rec["f_norm"][b, :, :n_k]),  # [head, n_k] ||W_O^h v_j||
        )
        if "rule" in rec:  # lean: nothing n x n, weights recomputed on access
            layers.append(
                LayerTrace(
                    scores=lean_scores,
                    weights=lean_weights,
                    mask=rec["rule"].item(b, n_q, n_k),
                    lse=own(rec["lse"][b, :, :n_q]),  # [head, n_q]
                    **common,
                )
            )
            continue
        mask = torch.ones(n_q, n_k, dtype=torch.bool)  # [q, k]
        if rec["mask"] is not None:
            item = rec["mask"][min(b, rec["mask"].shape[0] - 1), 0]  # [q|1, k]
            mask &= cpu(item[:n_q, :n_k]).bool()
        mask = next((m for m in masks if torch.equal(m, mask)), mask)
        if not any(m is mask for m in masks):
            masks.append(mask)
        layers.append(
            LayerTrace(
                scores=own(rec["scores"][b, :, :n_q, :n_k]),  # [head, n_q, n_k]
                mask=mask,  # [n_q, n_k]
                weights=own(rec["weights"][b, :, :n_q, :n_k]),  # [head, n_q, n_k]
                **common,
            )
        )
    return layers


def _first(model: LoadedModel, part: str) -> int:
    """The layer number (as in `ablate`) of the first block of a part."""
    return next(i for i, b in enumerate(model.blocks) if b.part == part)


def trace_model(
    model: LoadedModel,
    text: str,
    text_pair: str | None = None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: Iterable[tuple[int, int]] = (),
    mask_tokens: Iterable[int] = (),
    max_length: int | None = None,
) -> Trace:
    """Run `text` (and an optional second segment) through the model and record every layer.

    The knobs hold for this call only: use_scale=False drops the 1/sqrt(d_head) factor, temperature
    divides the logits, `ablate` zeroes the z of (layer, head) pairs before W_O, `mask_tokens` are
    key positions no query may attend to in any layer. Inputs past `max_length` (default: the
    model's limit) are truncated and the trace says so. A blank text_pair means none.

    A decoder's trace also holds `next_logits` (after the last token). For an encoder-decoder,
    `text` goes to the encoder and `text_pair` (default: `text`) is what the decoder reads after its
    start token; the Trace returned is the encoder's, with `.part("decoder")` and `.part("cross")`,
    and `ablate` numbers blocks in order: encoder layers, decoder layers, cross layers.
    """
    if not isinstance(model, LoadedModel):
        raise TypeError(f"model must come from load_model(), not {type(model).__name__}")
    knobs = dict(use_scale=use_scale, temperature=temperature, ablate=ablate)
    request = TraceRequest.of(model.key, text, text_pair, max_length, mask_tokens=mask_tokens,
                              **knobs)  # fmt: skip
    return trace_batch(model, [request])[0]


def embedding_cosine(a: Trace, b: Trace) -> float:
    """Cosine similarity of two traces' sentence embeddings (1 = the knobs changed nothing)."""
    if a.embedding is None or b.embedding is None:
        raise ValueError("both traces need an embedding: trace them with trace_model()")
    return float(F.cosine_similarity(a.embedding, b.embedding, dim=0))
