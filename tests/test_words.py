"""Attention between words and whole characters (attnviz.grouped): which pieces make a word for
each tokenizer family (real tokenizers: the bundled WordPiece and character ones, a byte-level BPE
trained here), w'[I, J] = mean over i in I of sum over j in J of w[i, j] against Hugging Face's
eager attentions, rows summing to 1, the mask rule, and a lean 4,096-token trace grouped a band
at a time."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

import attnviz.engine.budget as budget_module
from attnviz import StackConfig, grouped, special_share, trace_text
from attnviz.engine.hooked import load_model, resolve, trace_model
from attnviz.engine.trace import pooled_weights
from attnviz.measures.pieces import groups_of, scheme
from attnviz.serve import bandpool
from tests.test_moved import eager_moved
from tests.writes_models import bundled, eager_inputs

ATOL = 1e-4
TEXT = "The animal didn't cross the street because it was unbelievably tired."
ZH = "The cat，我爱水课。 ok"


def oracle(x: torch.Tensor, rows: list, cols: list) -> torch.Tensor:
    """w'[I, J] = mean over i in I of sum over j in J of x[i, j], one group at a time."""
    return torch.stack([
        torch.stack([x[..., r0:r1, c0:c1].sum(-1).mean(-1) for c0, c1 in cols], -1)
        for r0, r1 in rows
    ], -2)  # fmt: skip


def test_wordpiece_words():
    tok = AutoTokenizer.from_pretrained(resolve(None)[0])
    tokens = tok.convert_ids_to_tokens(tok(TEXT)["input_ids"])
    assert "##bel" in tokens and scheme(tokens) == "wordpiece"
    words = groups_of(tokens, "word", {0, len(tokens) - 1})
    assert words.labels == (
        "[CLS]", "the", "animal", "didn", "'", "t", "cross", "the", "street", "because", "it",
        "was", "unbelievably", "tired", ".", "[SEP]",
    )  # fmt: skip
    assert groups_of(tokens, "char").labels == tuple(t.removeprefix("##") for t in tokens)


def test_byte_level_pieces_of_one_character_read_as_one():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
    )  # fmt: skip
    tok.train_from_iterator(["the cat sat on the mat", "the animal was tired, believe it"] * 9,
                            trainer)  # fmt: skip
    from transformers import PreTrainedTokenizerFast

    from attnviz.engine.hooked.labels import token_labels

    encoded = tok.encode("<|endoftext|>the cat 我爱水课。 unbelievably tired, ok")
    tokens = encoded.tokens
    assert "Ġcat" in tokens and "æ" in tokens and scheme(tokens) == "bytes"  # 我 = 'æ' 'Ī' 'ĳ'
    # what a trace holds: the same pieces labelled as characters ('我', '◌我', '◌我')
    labels = token_labels(PreTrainedTokenizerFast(tokenizer_object=tok), encoded.ids)
    assert "◌我" in labels and scheme(labels) == "bytes"
    for pieces in (tokens, labels):
        chars = groups_of(pieces, "char")
        assert chars.labels[4:9] == ("我", "爱", "水", "课", "。")
        assert all(e - s == 3 for s, e in chars.spans[4:9])  # three byte pieces each
        assert groups_of(pieces, "word").labels == (
            "<|endoftext|>", "the", "cat", "我", "爱", "水", "课", "。", "unbelievably", "tired",
            ",", "ok",
        )  # fmt: skip


def test_sentencepiece_byte_fallback_and_char_tokenizers():
    pieces = ["<s>", "▁The", "▁play", "ing", "▁", "<0xE6>", "<0x88>", "<0x91>", "爱", ","]
    assert scheme(pieces) == "metaspace"
    assert groups_of(pieces, "char").labels == ("<s>", "The", "play", "ing", " ", "我", "爱", ",")
    assert groups_of(pieces, "word").labels == ("<s>", "The", "playing", "我", "爱", ",")
    char = AutoTokenizer.from_pretrained(resolve("attnviz-char-zh-en")[0])
    tokens = char.convert_ids_to_tokens(char(ZH)["input_ids"])
    assert scheme(tokens) == "chars"
    assert groups_of(tokens, "word").labels == ("[BOS]", "The", "cat", "，", "我", "爱", "水",
                                                "课", "。", "ok")  # fmt: skip


@pytest.fixture(scope="module", params=["minilm", "char"])
def pair(request):
    return bundled(request.param)


def test_grouped_matches_hf_eager_and_rows_sum_to_one(pair):
    text = ZH if pair.family == "llama" else TEXT
    trace = trace_model(pair.model, text)
    inputs = eager_inputs(pair, text)
    with torch.inference_mode():
        attentions = pair.eager(**inputs, output_attentions=True).attentions
    moved = eager_moved(pair, inputs)
    for by in ("word", "char"):
        g = grouped(trace, by)
        spans = g.meta["spans"]
        assert len(g.tokens) == len(spans) <= len(trace.tokens)
        assert by == "char" or len(spans) < len(trace.tokens)
        for layer, att, mv in zip(g.layers, attentions, moved, strict=True):
            want = oracle(att[0], spans, spans)  # [head, q', k']
            torch.testing.assert_close(layer.weights, want, atol=ATOL, rtol=0)
            torch.testing.assert_close(layer.moved, oracle(mv, spans, spans), atol=ATOL, rtol=0)
            torch.testing.assert_close(layer.weights.sum(-1), torch.ones(want.shape[:-1]))
            torch.testing.assert_close(layer.block("weights", 2, slice(1, 3)), want[2, 1:3])
            if pair.family == "llama":  # causal: word I may attend word J when J starts before
                allowed = torch.tensor([[c0 <= r1 - 1 for c0, _ in spans] for _, r1 in spans])
                assert torch.equal(layer.mask, allowed)
                assert torch.all(layer.weights[:, ~allowed] == 0)
    with pytest.raises(ValueError, match="scores"):
        grouped(trace).layers[0].block("scores", 0)


def test_stack_tokens_are_words_already():
    trace = trace_text("the cat sat on 我爱 the mat", StackConfig(causal=True))
    g = grouped(trace)
    assert g.tokens == trace.tokens
    torch.testing.assert_close(g.layers[0].weights, trace.layers[0].weights)
    torch.testing.assert_close(g.layers[0].moved, trace.layers[0].moved)


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """A tiny Llama that takes 4,096 tokens (with the bundled WordPiece tokenizer)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("long")
    config = LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4200)  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(resolve(None)[0])
    tok.model_max_length = 16_384
    tok.save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def test_a_lean_4096_token_trace_groups_a_band_at_a_time(long_model, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        words = ("the unbelievably tired animal didn't cross the street " * 600).split()
        trace = trace_model(long_model, " ".join(words), max_length=4096)
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    n = len(trace.tokens)
    assert n == 4096 and trace.layers[0].in_bands
    g = grouped(trace)
    layer, base = g.layers[1], trace.layers[1]
    n_words = len(g.tokens)
    assert n_words < n
    # nothing words x words (nor pieces x pieces) is stored: grouped on access
    assert not any(
        isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] >= n_words
        for t in layer.__dict__.values()
    )
    # a cache counts the layers of pieces it keeps alive
    assert sum(la.nbytes() for la in g.layers) == sum(la.nbytes() for la in trace.layers)
    assert "grouped on access" in repr(layer)
    spans = g.meta["spans"]
    rows, cols = torch.tensor([5, 2000, n_words - 1]), torch.arange(1990, 2010)
    c0, c1 = spans[1990][0], spans[2009][1]  # the pieces of those 20 words
    local = [(s - c0, e - c0) for s, e in spans[1990:2010]]
    for name in ("weights", "moved"):
        got = layer.block(name, 3, rows, cols)  # [3, 20]
        for i, (r0, r1) in enumerate(spans[r] for r in rows.tolist()):
            pieces = base.block(name, 3, torch.arange(r0, r1), torch.arange(c0, c1))
            want = oracle(pieces, [(0, r1 - r0)], local)[0]  # [20]
            torch.testing.assert_close(got[i], want, atol=ATOL, rtol=0)
    sums = layer.block("weights", 0, torch.tensor([0, 17, n_words // 2, n_words - 1])).sum(-1)
    torch.testing.assert_close(sums, torch.ones(4), atol=ATOL, rtol=0)
    # the overview's pooled map, a band at a time, is the pooled dense map of that head
    pooled = pooled_weights(g, 64, 64)  # [layer, head, 64, 64]
    want = torch.nn.functional.adaptive_avg_pool2d(layer.head("weights", 1)[None], (64, 64))[0]
    torch.testing.assert_close(pooled[1, 1], want, atol=1e-6, rtol=1e-4)


def test_a_lean_trace_of_one_piece_words_reads_the_pieces_pass(long_model, monkeypatch):
    """Chinese in WordPiece: every character is a piece and a word. The grouped numbers are the
    oracle's, and the words' overview needs no pass of its own: the pieces' pass serves it."""
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        trace = trace_model(
            long_model, "我爱水课人工智能是计算机科学的一个分支" * 40, max_length=700
        )
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    assert trace.layers[0].in_bands
    g = grouped(trace)
    n = len(trace.tokens)
    assert g.tokens == trace.tokens and g.layers[1].one_to_one
    layer, base = g.layers[1], trace.layers[1]
    spans = [(i, i + 1) for i in range(n)]
    rows, cols = torch.tensor([0, 350, n - 1]), torch.arange(300, 360)
    for name in ("weights", "moved", "mask"):
        got = layer.block(name, 2, rows, cols)  # [3, 60]
        dense = base.block(name, 2).float()  # [n, n]
        want = oracle(dense, [spans[r] for r in rows.tolist()], spans[300:360])
        if name == "mask":  # a group may attend a group when any of their pieces may
            assert torch.equal(got, want > 0)
        else:
            torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    side, specials = bandpool.overview_key(g)
    assert layer.pass_due(side, specials, maps=True)
    pieces = pooled_weights(trace, *side)  # the pieces' pass
    assert not any(la.pass_due(side, specials, maps=True) for la in g.layers)
    torch.testing.assert_close(pooled_weights(g, *side), pieces)
    want = torch.nn.functional.adaptive_avg_pool2d(base.head("weights", 1)[None], side)[0]
    torch.testing.assert_close(pieces[1, 1], want, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(layer.head_map("weights", 1, 64), base.head_map("weights", 1, 64))


def test_special_share_of_words_is_the_ratio_of_sums(pair):
    """The Kobayashi comparison over words: specials ([CLS]/[SEP], the char model's [BOS]) and
    punctuation words, from the grouped weights and moved."""
    g = grouped(trace_model(pair.model, ZH if pair.family == "llama" else TEXT))
    table = special_share(g)
    specials = [j for j, t in enumerate(g.tokens) if t in ("[CLS]", "[SEP]", "[BOS]")]
    assert specials and specials[0] == 0
    for row in table.itertuples():
        w, m = g.layers[row.layer].weights[row.head], g.layers[row.layer].moved[row.head]
        assert row.weights_special == pytest.approx(float(w[:, specials].sum() / w.sum()), 1e-5)
        assert row.moved_special == pytest.approx(float(m[:, specials].sum() / m.sum()), 1e-5)
