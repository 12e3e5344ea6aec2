"""Attention while generating (attnviz.engine.generate), checked against oracles: each step's rows
equal the last row of a fresh trace_model of prompt + t generated tokens (1e-5), the KV-cache path
equals the no-cache path, and the cache's measured bytes equal the formula of lessons.costs.
Tiny random decoders from their config classes, with a word-level tokenizer saved in the Hugging
Face format (so a generated text tokenizes back to the same ids)."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, PreTrainedTokenizerFast

from attnviz.engine.generate import Sampling, WhatIf, generate, generation_bytes
from attnviz.engine.hooked import load_model, trace_model
from attnviz.lessons.costs import kv_cache_bytes

ATOL = 1e-5
SPECIAL = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
WORDS = [f"w{i}" for i in range(60)]
PROMPT = "w1 w2 w3 w4 w1 w2"
N_NEW = 8


def word_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", vocab["[BOS]"])]
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="[BOS]", eos_token="[EOS]", unk_token="[UNK]",
        pad_token="[PAD]",
    )  # fmt: skip


VOCAB = len(SPECIAL) + len(WORDS)
CONFIGS = {
    "llama": lambda: LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    ),
    "gpt2": lambda: GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
        bos_token_id=1, eos_token_id=2,
    ),
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def decoder(request, tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp(request.param)
    AutoModelForCausalLM.from_config(CONFIGS[request.param]()).save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def text_of(run, n: int) -> str:
    """Prompt + generated tokens up to position n (exclusive), as text (without [BOS])."""
    return " ".join(run.tokens[1:n])


def check_against_fresh_traces(model, run, **knobs) -> None:
    assert len(run.steps) >= 2
    for t, step in enumerate(run.steps):
        n = run.n_prompt + t
        assert step.position == n - 1
        trace = trace_model(model, text_of(run, n), **knobs)
        assert trace.tokens == run.tokens[:n], "the text must tokenize back to the same ids"
        for layer, lt in enumerate(trace.layers):
            fresh = lt.weights[:, -1]  # [head, n_k] the last query's row
            assert step.weights[layer].shape == fresh.shape
            torch.testing.assert_close(step.weights[layer], fresh, atol=ATOL, rtol=0)
            assert step.scale[layer] == pytest.approx(lt.scale)
        # the token chosen is the trace's own greedy next token
        if run.sampling.greedy:
            assert step.next_id == int(torch.argmax(trace.next_logits))


def test_rows_equal_a_fresh_trace_of_prompt_plus_t_tokens(decoder) -> None:
    run = generate(decoder, PROMPT, n_new=N_NEW)
    assert run.n_prompt == 7  # [BOS] + six words
    check_against_fresh_traces(decoder, run)
    for step in run.steps:
        sums = step.weights.sum(-1)  # [layer, head]
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)


def test_what_if_knobs_apply_at_every_step(decoder) -> None:
    knobs = dict(use_scale=False, temperature=2.0, ablate={(0, 1)})
    run = generate(decoder, PROMPT, n_new=N_NEW, what_if=WhatIf(**knobs))
    check_against_fresh_traces(decoder, run, **knobs)
    base = generate(decoder, PROMPT, n_new=N_NEW)
    # no scale at temperature 2: the rows of step 0 differ from the unchanged model's
    assert (run.steps[0].weights - base.steps[0].weights).abs().max() > 1e-3


def test_kv_cache_path_equals_the_no_cache_path(decoder) -> None:
    sampling = Sampling(greedy=False, temperature=1.5, top_k=20, seed=7)
    cached = generate(decoder, PROMPT, n_new=N_NEW, sampling=sampling)
    plain = generate(decoder, PROMPT, n_new=N_NEW, sampling=sampling, cache=False)
    assert cached.ids == plain.ids
    for a, b in zip(cached.steps, plain.steps, strict=True):
        torch.testing.assert_close(a.weights, b.weights, atol=ATOL, rtol=0)
        assert a.kv_bytes == b.kv_bytes
        assert a.p_next == pytest.approx(b.p_next, abs=1e-5)


def test_cache_grows_by_the_formula(decoder) -> None:
    run = generate(decoder, PROMPT, n_new=N_NEW)
    n_kv = decoder.n_kv_heads or decoder.n_heads
    for step in run.steps:
        n = step.position + 1
        assert step.kv_bytes == kv_cache_bytes(decoder.n_layers, n_kv, decoder.d_head, n, 1, 4)
    grown = {b.kv_bytes - a.kv_bytes for a, b in zip(run.steps, run.steps[1:], strict=False)}
    assert grown == {kv_cache_bytes(decoder.n_layers, n_kv, decoder.d_head, 1, 1, 4)}
    assert run.nbytes() == generation_bytes(
        decoder.n_layers, decoder.n_heads, run.n_prompt, len(run.steps)
    )


def test_sampling_is_seeded(decoder) -> None:
    def ids(seed: int) -> list[int]:
        sampling = Sampling(greedy=False, temperature=3.0, seed=seed)
        return generate(decoder, PROMPT, n_new=N_NEW, sampling=sampling).generated

    assert ids(1) == ids(1)
    assert ids(1) != ids(2)  # at temperature 3 over 64 tokens, 8 equal draws would be a fluke
    top1 = Sampling(greedy=False, top_k=1, seed=3)
    assert generate(decoder, PROMPT, 5, top1).ids == generate(decoder, PROMPT, 5).ids


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompt="   "), "prompt is empty"),
        (dict(n_new=0), "n_new=0"),
        (dict(n_new=100), "reads at most 64"),
        (dict(what_if=WhatIf(ablate={(5, 0)})), "outside the model"),
    ],
)
def test_bad_settings_get_clear_messages(decoder, kwargs, message) -> None:
    args = dict(prompt=PROMPT) | kwargs
    with pytest.raises(ValueError, match=message):
        generate(decoder, **args)


def test_bad_sampling_settings_are_refused() -> None:
    for bad in (dict(temperature=0.0), dict(top_k=-1), dict(seed=1.5), dict(greedy="yes")):
        with pytest.raises((ValueError, TypeError)):
            Sampling(**bad)


def test_an_encoder_is_refused() -> None:
    with pytest.raises(ValueError, match="only a decoder"):
        generate(load_model(None, device="cpu"), "the cat sat")


def test_the_unknown_token_is_never_written() -> None:
    # The trained character model maps every rare poem character to [UNK]; greedy decoding after
    # a Tang line picked it five times in a row before the unknown token was taken out.
    model = load_model("attnviz-char-zh-en")
    run = generate(model, "床前明月光，", 8, Sampling(greedy=True))
    new = run.tokens[run.n_prompt :]
    assert len(new) == 8 and "[UNK]" not in new
    unk = model.tokenizer.unk_token_id
    assert all(i != unk for s in run.steps for i, _ in s.top)


def test_a_prompt_past_the_context_a_server_generates_from_is_refused(decoder, monkeypatch) -> None:
    # The prompt's first forward records every head over the whole prompt: an 8,000-token prompt
    # on SmolLM2 took 19 GB there (its kept rows, 138 MB, were under the budget). The prompt and
    # its new tokens must fit MAX_CONTEXT, refused before any forward.
    from attnviz.engine import generate as module

    monkeypatch.setattr(module, "MAX_CONTEXT", 6)
    with pytest.raises(ValueError, match="generates from at most 6 tokens"):
        generate(decoder, PROMPT, n_new=8)
    assert len(generate(decoder, "the", n_new=2).steps) >= 1  # [BOS] the + 2 fits
