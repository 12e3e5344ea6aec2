"""A padded batch traced with its padding kept, for tests that check what padding does to masks and
weights against Hugging Face's own padded batch: the engine's two steps (run_forward, assemble)
called on texts tokenized together. trace_batch instead cuts each trace to its own tokens and
batches only what may share a forward."""

from __future__ import annotations

from attnviz.engine import validate
from attnviz.engine.hooked.assembly import assemble
from attnviz.engine.hooked.forward import Batch, run_forward
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.preparing import encoded, limit_for
from attnviz.engine.request import Knobs
from attnviz.engine.trace import Trace


def padded_traces(
    model: LoadedModel, texts: list[str], pairs: list[str] | None = None
) -> list[Trace]:
    """One trace per text, all padded to the longest (pad positions in `special["[PAD]"]`);
    `pairs`: second texts, or an encoder-decoder's decoder texts."""
    texts, pairs, limit = validate.model_inputs(model, texts, pairs, None)
    limit = limit_for(model, limit, None, len(texts))
    enc, n_input, dec = encoded(model, texts, pairs, limit)
    batch = Batch(enc, n_input, dec, Knobs(), limit)
    return assemble(model, batch, run_forward(model, batch))
