"""Decoders share forwards: sentences of different lengths run as one batch padded on the right,
and each trace, cut to its own tokens, is the one the sentence gets alone; the oracle is Hugging
Face's eager attention with the sentence alone. Tiny random models of the families whose
positions differ (RoPE with GQA, GPT-2's learned positions, Gemma 3's sliding window and
q/k norms) and the bundled character decoder."""

from __future__ import annotations

import pytest
import torch

from attnviz.engine.hooked import batches_texts, trace_batch, trace_each, trace_model
from attnviz.engine.request import TraceRequest
from tests.test_hooked import BATCH_TOL, assert_same_trace
from tests.writes_models import eager_inputs, gemma3_family, make_pair

TEXTS = ["the cat sat on the mat and looked at the old dog", "hi", "one two three four"]


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma3_text", "char"])
def pair(request, tmp_path_factory):
    with gemma3_family():
        yield make_pair(request.param, tmp_path_factory)


def test_a_decoders_sentences_share_one_forward_and_each_trace_is_its_own(pair, monkeypatch):
    import attnviz.engine.hooked.tracing as tracing

    model = pair.model
    assert batches_texts(model)
    forwards = []
    run = tracing.run_forward
    monkeypatch.setattr(
        tracing, "run_forward", lambda *a, **k: forwards.append(a[1].n_input) or run(*a, **k)
    )
    texts = TEXTS
    batched = trace_each(model, texts)
    assert len(forwards) == 1 and len(set(forwards[0])) == len(texts)  # padded: lengths differ
    for text, trace in zip(texts, batched, strict=True):
        alone = trace_model(model, text)
        assert_same_trace(trace, alone)
        torch.testing.assert_close(trace.next_logits, alone.next_logits, **BATCH_TOL)
        # The oracle: the eager model on the sentence alone, its weights and next-token logits.
        with torch.inference_mode():
            ref = pair.eager(**eager_inputs(pair, text), output_attentions=True)
        for layer, weights in zip(trace.layers, ref.attentions, strict=True):
            torch.testing.assert_close(layer.weights, weights[0], **BATCH_TOL)
            assert torch.allclose(layer.weights.sum(-1), torch.ones(()), atol=1e-5)
            assert torch.all(layer.weights[:, ~layer.mask] == 0)  # masked weights exactly 0
        torch.testing.assert_close(trace.next_logits, ref.logits[0, -1], **BATCH_TOL)
        # Each owns its tensors: a view into the batch would keep the whole batch alive.
        weights = trace.layers[0].weights
        assert weights.untyped_storage().nbytes() == weights.nbytes


def test_the_logits_kept_are_each_inputs_last_and_only_those(pair, monkeypatch):
    """A padded batch keeps the logits after each input's last real token (the lm_head over
    every padded position would cost a vocabulary-wide matmul per position)."""
    kept = []
    model = pair.model
    real = model.model.forward

    def spy(*args, **kwargs):
        kept.append(kwargs.get("logits_to_keep"))
        return real(*args, **kwargs)

    monkeypatch.setattr(model.model, "forward", spy)
    requests = [TraceRequest(text=t, model=model.key) for t in TEXTS]
    traces = trace_batch(model, requests)
    lasts = sorted({len(t.tokens) - 1 for t in traces})
    assert len(kept) == 1 and kept[0].tolist() == lasts
    alone = trace_batch(model, requests[:1])[0]  # alone: no padding, the last position only
    # as a position, not the int 1 (transformers slices an int into a strided view that lm_head
    # multiplies with a copy of its weight per sentence)
    assert kept[-1].tolist() == [len(alone.tokens) - 1]
