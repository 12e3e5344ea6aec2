"""hooked.py: pretrained BERT through AttentionInterface, checked against Hugging Face eager."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from transformers import (
    AutoModel,
    AutoTokenizer,
    BertConfig,
    BertModel,
    DistilBertConfig,
    T5Config,
)

from attnviz.engine.hooked import (
    IMPL,
    LoadedModel,
    embedding_cosine,
    load_model,
    resolve,
    trace_batch,
    trace_each,
    trace_model,
)
from attnviz.measures.stats import mean_entropy, mean_max_weight
from tests.padded import padded_traces

TEXT = "The cat sat on the mat."
PAIR = "It was very happy."
ATOL = 1e-5


@pytest.fixture(scope="module")
def minilm() -> LoadedModel:
    return load_model()


@pytest.fixture(scope="module")
def minilm_eager() -> torch.nn.Module:
    return AutoModel.from_pretrained(resolve(None)[0], attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random BERT (2 layers, 4 heads, hidden 32, 64 positions), bundled tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(resolve(None)[0])
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> LoadedModel:
    return load_model(str(tiny_dir))


def eager_run(model: torch.nn.Module, tokenizer, texts, pairs=None):
    enc = tokenizer(texts, pairs, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return model(**enc, output_attentions=True)


def test_bundled_model_loads_offline_with_attnviz_attention(minilm):
    assert (minilm.n_layers, minilm.n_heads, minilm.d_head) == (6, 12, 32)
    assert minilm.max_length == 512 and minilm.device == "cpu"
    assert minilm.model.config._attn_implementation == IMPL
    assert not minilm.model.training


def test_weights_and_hidden_match_hf_eager(minilm, minilm_eager):
    trace = trace_model(minilm, TEXT, PAIR)
    ref = eager_run(minilm_eager, minilm.tokenizer, TEXT, PAIR)
    assert len(trace.layers) == len(ref.attentions) == 6
    for layer, weights in zip(trace.layers, ref.attentions, strict=True):
        torch.testing.assert_close(layer.weights, weights[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(trace.hidden, ref.last_hidden_state[0], atol=ATOL, rtol=0)
    # Called without attnviz keywords, the model is plain eager attention.
    enc = minilm.tokenizer(TEXT, return_tensors="pt")
    with torch.inference_mode():
        plain = minilm.model(**enc).last_hidden_state
    ref = eager_run(minilm_eager, minilm.tokenizer, TEXT)
    torch.testing.assert_close(plain, ref.last_hidden_state, atol=ATOL, rtol=0)


def test_trace_tensors_obey_their_definitions(minilm):
    trace = trace_model(minilm, TEXT)
    n = len(trace.tokens)
    for i, layer in enumerate(trace.layers):
        assert layer.q.shape == (12, n, 32) and layer.k.shape == layer.v.shape == (12, n, 32)
        assert layer.scores.shape == layer.weights.shape == (12, n, n)
        assert layer.output.shape == (n, 384) and layer.mask.dtype == torch.bool
        assert layer.scale == pytest.approx(32**-0.5)
        torch.testing.assert_close(layer.scores, layer.q @ layer.k.transpose(-1, -2))
        torch.testing.assert_close(layer.weights, torch.softmax(layer.logits(), dim=-1))
        torch.testing.assert_close(layer.weights.sum(-1), torch.ones(12, n))
        torch.testing.assert_close(layer.z, layer.weights @ layer.v)
        dense = minilm.layers[i].attention.output.dense
        z_cat = layer.z.transpose(0, 1).reshape(n, 12 * 32)  # [n, head * d_head]
        torch.testing.assert_close(layer.output, z_cat @ dense.weight.T + dense.bias)
        query = minilm.layers[i].attention.self.query
        q = (layer.x @ query.weight.T + query.bias).view(n, 12, 32).transpose(0, 1)  # [h, n, d]
        torch.testing.assert_close(layer.q, q)
    torch.testing.assert_close(trace.embedding, trace.hidden.mean(0))
    assert trace.source == minilm.name and trace.meta["device"] == "cpu"


def test_sentence_pair_segments_and_special_positions(minilm):
    trace = trace_model(minilm, TEXT, PAIR)
    first = len(minilm.tokenizer.tokenize(TEXT)) + 2  # [CLS] text [SEP]
    assert trace.tokens[0] == "[CLS]" and trace.special["[CLS]"] == [0]
    assert trace.special["[SEP]"] == [first - 1, len(trace.tokens) - 1]
    assert trace.token_types == [0] * first + [1] * (len(trace.tokens) - first)
    assert trace.special["[PAD]"] == []
    assert trace_model(minilm, TEXT, "  ").token_types == [0] * first


def test_padded_keys_get_exactly_zero_weight(tiny, tiny_dir):
    texts = ["one two three four five six", "one"]
    traces = padded_traces(tiny, texts)
    short = traces[1]
    pads = short.special["[PAD]"]
    assert pads and all(short.tokens[p] == "[PAD]" for p in pads)
    eager = AutoModel.from_pretrained(tiny_dir, attn_implementation="eager").eval()
    ref = eager_run(eager, tiny.tokenizer, texts)
    alone = trace_model(tiny, texts[1])
    m = len(alone.tokens)
    for i, layer in enumerate(short.layers):
        assert torch.all(layer.weights[:, :, pads] == 0)
        assert not layer.mask[:, pads].any() and layer.mask[:, :m].all()
        torch.testing.assert_close(layer.weights, ref.attentions[i][1], atol=ATOL, rtol=0)
        torch.testing.assert_close(
            layer.weights[:, :m, :m], alone.layers[i].weights, atol=ATOL, rtol=0
        )
    torch.testing.assert_close(short.embedding, alone.embedding, atol=ATOL, rtol=0)


EACH = [
    "The cat sat on the mat.",
    "A much longer sentence, with a comma, that pads every shorter one in its batch.",
    "短句子。",
    "Hi",
    "The cat sat on the mat.",
]
LAYER_FIELDS = ("q", "k", "v", "scores", "weights", "z", "output")
# One input in a padded batch and alone: float32 sums in another order through six layers, ~2e-5
# apart at most (the pages print 4 decimals of a weight, 3 of a score).
BATCH_TOL = dict(atol=5e-5, rtol=1e-4)


def assert_same_trace(got, want) -> None:
    """Two traces of one input, from different batches: equal up to float rounding."""
    assert got.tokens == want.tokens and got.special == want.special
    assert got.token_types == want.token_types and got.meta == want.meta
    assert (got.truncated, got.n_input_tokens) == (want.truncated, want.n_input_tokens)
    for a, b in zip(got.layers, want.layers, strict=True):
        assert torch.equal(a.mask, b.mask) and a.scale == b.scale
        for name in LAYER_FIELDS:
            torch.testing.assert_close(getattr(a, name), getattr(b, name), **BATCH_TOL)
    torch.testing.assert_close(got.hidden, want.hidden, **BATCH_TOL)
    torch.testing.assert_close(got.embedding, want.embedding, **BATCH_TOL)


def test_trace_each_gives_each_input_its_own_unpadded_trace(minilm, minilm_eager, monkeypatch):
    import attnviz.engine.hooked.tracing as tracing

    forwards = []
    run = tracing.run_forward
    monkeypatch.setattr(
        tracing, "run_forward", lambda *a, **k: forwards.append(a[1].n_input) or run(*a, **k)
    )
    traces = trace_each(minilm, EACH)
    assert len(forwards) == 1 and sorted(forwards[0]) == sorted(len(t.tokens) for t in traces)
    for text, trace in zip(EACH, traces, strict=True):
        assert "[PAD]" not in trace.tokens and trace.special["[PAD]"] == []
        assert_same_trace(trace, trace_model(minilm, text))
        # Each owns its tensors: a view into the batch would keep the whole batch alive.
        assert trace.layers[0].weights.untyped_storage().nbytes() == trace.layers[0].weights.nbytes
        # The oracle: Hugging Face's eager attention, the sentence alone.
        ref = eager_run(minilm_eager, minilm.tokenizer, text)
        for layer, weights in zip(trace.layers, ref.attentions, strict=True):
            torch.testing.assert_close(layer.weights, weights[0], **BATCH_TOL)
        torch.testing.assert_close(trace.hidden, ref.last_hidden_state[0], **BATCH_TOL)
    knobs = dict(temperature=2.0, ablate=[(1, 3)], use_scale=False)
    before = len(forwards)
    knobbed = trace_each(minilm, EACH, **knobs)
    assert len(forwards) == before + 1
    for text, trace in zip(EACH, knobbed, strict=True):
        assert_same_trace(trace, trace_model(minilm, text, **knobs))
        assert torch.all(trace.layers[1].z[3] == 0)  # what `ablate` silences


def test_trace_each_batches_only_within_the_trace_budget(minilm, monkeypatch):
    import attnviz.engine.budget
    import attnviz.engine.hooked.tracing as tracing

    forwards = []
    run = tracing.run_forward
    monkeypatch.setattr(
        tracing, "run_forward", lambda *a, **k: forwards.append(a[1].n_input) or run(*a, **k)
    )
    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_BYTES", str(8 * 2**20))  # one 60-token input fits
    attnviz.engine.budget.budget.cache_clear()
    try:
        texts = [f"sentence number {i} is about a cat on a mat" for i in range(8)]
        traces = trace_each(minilm, texts + ["word " * 58], max_length=64)
    finally:
        monkeypatch.delenv("ATTNVIZ_MAX_TRACE_BYTES")
        attnviz.engine.budget.budget.cache_clear()
    # The eight short ones in one forward, the long one alone: with it, over the budget.
    assert sorted(map(len, forwards)) == [1, 8] and forwards[-1] == [60]
    for n_input in forwards:
        assert (
            attnviz.engine.budget.model_trace_bytes(6, 12, 32, len(n_input), max(n_input))
            <= 8 * 2**20
        )
    assert attnviz.engine.budget.model_trace_bytes(6, 12, 32, 2, 60) > 8 * 2**20
    assert_same_trace(traces[5], trace_model(minilm, texts[5], max_length=64))
    assert len(traces[-1].tokens) == 60


def test_trace_each_takes_one_input_at_a_time_where_padding_would_differ(tiny, monkeypatch):
    import attnviz.engine.hooked.tracing as tracing

    monkeypatch.setattr(tiny.call_tokenizer, "padding_side", "left")
    forwards = []
    run = tracing.run_forward
    monkeypatch.setattr(
        tracing, "run_forward", lambda *a, **k: forwards.append(a[1].n_input) or run(*a, **k)
    )
    traces = trace_each(tiny, ["one two three", "four"])
    assert forwards == [[3], [5]] and [len(t.tokens) for t in traces] == [5, 3]
    with pytest.raises(ValueError, match="empty"):
        trace_each(tiny, [])
    with pytest.raises(TypeError, match="list of sentences"):
        trace_each(tiny, "one sentence")
    with pytest.raises(TypeError, match="TraceRequests"):
        trace_batch(tiny, ["one sentence"])  # texts come as requests (attnviz.engine.request)


def test_no_scale_sharpens_and_temperature_flattens(minilm):
    base = trace_model(minilm, TEXT)
    sharp = trace_model(minilm, TEXT, use_scale=False)
    warm = trace_model(minilm, TEXT, temperature=2.0)
    assert sharp.layers[0].scale == 1.0 and sharp.meta["use_scale"] is False
    assert warm.layers[0].scale == pytest.approx(32**-0.5 / 2)
    torch.testing.assert_close(sharp.layers[0].scores, base.layers[0].scores)
    assert mean_max_weight(sharp.weights()) > mean_max_weight(base.weights()) + 0.05
    assert mean_entropy(sharp.weights()) < mean_entropy(base.weights()) - 0.1
    assert mean_entropy(warm.weights()) > mean_entropy(base.weights()) + 0.1
    assert embedding_cosine(base, base) == pytest.approx(1.0)


def test_ablating_a_head_zeroes_its_z_and_moves_the_embedding(minilm):
    base = trace_model(minilm, TEXT)
    cut = trace_model(minilm, TEXT, ablate=[(2, 5)])
    assert torch.all(cut.layers[2].z[5] == 0)
    keep = [h for h in range(12) if h != 5]
    torch.testing.assert_close(cut.layers[2].z[keep], base.layers[2].z[keep])
    torch.testing.assert_close(cut.layers[1].output, base.layers[1].output)
    assert not torch.allclose(cut.layers[2].output, base.layers[2].output, atol=1e-4)
    assert not torch.allclose(cut.hidden, base.hidden, atol=1e-4)
    assert embedding_cosine(base, cut) < 1 - 1e-6
    assert cut.meta["ablate"] == [(2, 5)]


def test_masked_token_gets_zero_weight_from_every_query(minilm):
    trace = trace_model(minilm, TEXT, mask_tokens=[3])
    n = len(trace.tokens)
    for layer in trace.layers:
        assert torch.all(layer.weights[:, :, 3] == 0)
        assert not layer.mask[:, 3].any() and layer.mask.sum() == n * (n - 1)
        torch.testing.assert_close(layer.weights.sum(-1), torch.ones(12, n))
    assert embedding_cosine(trace, trace_model(minilm, TEXT)) < 1 - 1e-6


def test_concurrent_calls_with_different_knobs_do_not_mix(minilm):
    knobs = [{"use_scale": False}, {"use_scale": True}]
    alone = [trace_model(minilm, TEXT, **k) for k in knobs]
    barrier = threading.Barrier(len(knobs))
    errors: list[str] = []

    def worker(index: int) -> None:
        for it in range(25):
            barrier.wait()
            got = trace_model(minilm, TEXT, **knobs[index])
            want = alone[index]
            same = torch.equal(got.hidden, want.hidden) and all(
                torch.equal(a.weights, b.weights)
                for a, b in zip(got.layers, want.layers, strict=True)
            )
            if not same:
                errors.append(f"thread {index} iteration {it} differs from its solo run")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(knobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]


def test_concurrent_truncating_calls_do_not_mix(tiny):
    """Truncation and padding settings live on a fast tokenizer: calls must not share them."""
    calls = [
        {"text": " ".join(["word"] * 90)},  # truncated at 64
        {"text": TEXT, "text_pair": PAIR, "max_length": 10},  # truncated at 10
        {"text": "short one"},  # fits
    ]
    alone = [trace_model(tiny, **c) for c in calls]
    barrier = threading.Barrier(len(calls))
    errors: list[str] = []

    def worker(index: int) -> None:
        for it in range(30):
            barrier.wait()
            try:
                got = trace_model(tiny, **calls[index])
            except Exception as e:  # noqa: BLE001 - report, do not hang the barrier
                errors.append(f"call {index} iteration {it} raised {e!r}")
                barrier.abort()
                return
            want = alone[index]
            if got.tokens != want.tokens or not torch.equal(got.hidden, want.hidden):
                errors.append(f"call {index} iteration {it} differs from its solo run")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]


def test_hub_name_fails_fast_when_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ValueError, match="(?s)offline.*folder"):
        load_model("bert-base-uncased")
    assert time.monotonic() - start < 10


def test_unknown_hub_name_fails_fast(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    start = time.monotonic()
    # No internet: "cannot be reached"; with internet: "No model ... on the Hub".
    with pytest.raises(ValueError, match="folder"):
        load_model("attnviz-tests/no-such-model-4f2b9c")
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError, match="No such folder"):
        load_model(str(tmp_path / "missing"))


def test_local_folder_loads(tiny, tiny_dir):
    assert (tiny.n_layers, tiny.n_heads, tiny.d_head, tiny.max_length) == (2, 4, 8, 64)
    assert tiny.name == str(tiny_dir)
    trace = trace_model(tiny, TEXT)
    assert trace.n_layers == 2 and trace.layers[0].weights.shape[0] == 4


def test_unsupported_families_are_refused_by_name(tmp_path):
    DistilBertConfig(n_layers=1, dim=16, n_heads=2, hidden_dim=32).save_pretrained(tmp_path / "d")
    with pytest.raises(ValueError, match="'distilbert' model; attnviz traces these families"):
        load_model(str(tmp_path / "d"))
    T5Config(num_layers=1, d_model=16, num_heads=2, d_kv=8, d_ff=32).save_pretrained(tmp_path / "t")
    with pytest.raises(ValueError, match="(?s)'t5' model, not supported.*position bias"):
        load_model(str(tmp_path / "t"))


def test_long_text_is_truncated_and_says_so(tiny, minilm):
    long = " ".join(["word"] * 100)
    trace = trace_model(tiny, long)
    assert trace.truncated and len(trace.tokens) == 64 and trace.n_input_tokens == 102
    assert trace.tokens[-1] == "[SEP]"
    assert not trace_model(tiny, "short words").truncated
    cut = trace_model(minilm, TEXT, max_length=5)
    assert cut.truncated and len(cut.tokens) == 5 and cut.n_input_tokens == 9


def test_bad_inputs_raise_clear_errors(minilm):
    for text in ("", "   "):
        with pytest.raises(ValueError, match="empty"):
            trace_model(minilm, text)
    with pytest.raises(ValueError, match="temperature"):
        trace_model(minilm, TEXT, temperature=0)
    with pytest.raises(ValueError, match="layers 0..5"):
        trace_model(minilm, TEXT, ablate=[(6, 0)])
    with pytest.raises(ValueError, match="mask_tokens"):
        trace_model(minilm, TEXT, mask_tokens=[99])
    with pytest.raises(ValueError, match="max_length"):
        trace_model(minilm, TEXT, max_length=1000)
