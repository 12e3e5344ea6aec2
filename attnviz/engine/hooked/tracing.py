"""Tracing: run a loaded model once with the recorder and knobs, and build one Trace per input.

A trace starts as a TraceRequest (attnviz.engine.request). `prepare` tokenizes it once and
weighs it (the bytes of its full trace); `trace_batch(model, requests)` runs requests that may
share a forward (`may_share`) as one padded batch and cuts each trace to its own tokens. Which
requests go together is the caller's decision (a server's batcher, or `trace_each`): the engine
does no regrouping. A forward is two steps: `forward.run_forward` (tokens in, one LayerRecord per
block and the model's outputs out) and `assembly.assemble` (records in, Traces out).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch.nn.functional as F

from attnviz.engine.budget import budget
from attnviz.engine.errors import EmptyInput
from attnviz.engine.hooked.assembly import assemble
from attnviz.engine.hooked.encoding import collate
from attnviz.engine.hooked.forward import Batch, run_forward
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.preparing import Prepared, groups, may_share, prepare
from attnviz.engine.request import Knobs, TraceRequest
from attnviz.engine.trace import Trace


def trace_batch(model: LoadedModel, requests: Sequence[TraceRequest | Prepared]) -> list[Trace]:
    """One Trace per request, each what `trace_model` gives for it. Requests (or Prepared ones)
    of one group that `may_share` run as one padded forward, each trace cut to its own tokens;
    otherwise each runs alone. Which requests to put together is the caller's choice."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        raise TypeError(f"requests must be a list of TraceRequests, not {type(requests).__name__}")
    requests = list(requests)
    if not requests:
        raise EmptyInput("requests is empty: give at least one TraceRequest")
    for r in requests:
        if not isinstance(r, (TraceRequest, Prepared)):
            raise TypeError(f"requests must be TraceRequests (attnviz.engine.request), not "
                            f"{type(r).__name__}")  # fmt: skip
    items = [r if isinstance(r, Prepared) else prepare(model, r) for r in requests]
    shared = len(items) > 1 and all(may_share(model, i) for i in items)
    if shared and len({i.request.group for i in items}) == 1:
        return _run_prepared(model, items)
    return [t for item in items for t in _run_prepared(model, [item])]


def _run_prepared(model: LoadedModel, items: list[Prepared]) -> list[Trace]:
    """The traces of prepared requests run as one forward (one of them, or several that share):
    the forward step records, the assembly step builds the traces."""
    first = items[0]
    enc = first.enc if len(items) == 1 else collate(model, [i.enc for i in items])
    batch = Batch(enc, [i.n_input for i in items], first.dec, first.request.knobs, first.limit,
                  trim=len(items) > 1)  # fmt: skip
    traces = assemble(model, batch, run_forward(model, batch))
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
