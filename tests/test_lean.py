"""Lean traces (attnviz.engine.lean): nothing n x n is stored, scores and weights are recomputed
from q, k, the mask rule, the scale and the per-row log-sum-exp. Checked against Hugging Face's
eager attention (output_attentions) for every traced family, tiny random models built from their
config classes, at n up to 1,024 and on blocks of a 4,096-token input; and against the full trace
for every knob."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    BertConfig,
)

import attnviz.engine.budget as budget_module
from attnviz.engine.budget import lean_trace, model_lean_bytes, model_trace_bytes
from attnviz.engine.hooked import load_model, resolve, trace_model
from attnviz.engine.lean import MaskRule, attend_lean
from attnviz.engine.trace import pooled_weights
from tests.padded import padded_traces
from tests.test_families import CONFIGS, TEXTS, WINDOW, WINDOWED

ATOL = 1e-5
WORDS = "the cat sat on the mat and then it slept while a dog ran past the old red house"
FAMILIES = sorted(CONFIGS) + ["bert"]


def words(n: int) -> str:
    return " ".join(WORDS.split()[i % 19] for i in range(n))


def set_full_bytes(monkeypatch, value: int | None) -> None:
    if value is None:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES", raising=False)
    else:
        monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", str(value))
    budget_module.budget.cache_clear()


@pytest.fixture
def lean(monkeypatch):
    """Every trace in the test is lean (one byte is over the full-trace limit)."""
    set_full_bytes(monkeypatch, 1)
    yield
    set_full_bytes(monkeypatch, None)


@pytest.fixture(scope="module")
def tokenizer():
    tok = AutoTokenizer.from_pretrained(resolve(None)[0])
    tok.model_max_length = 16_384  # the bundled tokenizer says 512; these models take more
    return tok


def _build(family: str, folder, tokenizer, positions: int = 4200):
    torch.manual_seed(0)
    if family == "bert":
        config = BertConfig(
            vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=positions,
        )  # fmt: skip
        auto = AutoModel
    else:
        config = CONFIGS[family]()
        if family == "gpt2":
            config.n_positions = positions
        else:
            config.max_position_embeddings = positions
        auto = AutoModelForCausalLM
    auto.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    eager = auto.from_pretrained(folder, attn_implementation="eager").eval()
    return load_model(str(folder), device="cpu"), eager


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory, tokenizer):
    name = request.param
    return (name, *_build(name, tmp_path_factory.mktemp(name), tokenizer))


def eager_attentions(eager, tokenizer, texts, max_length):
    enc = tokenizer(
        texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
    )
    if eager.config.model_type != "bert":  # decoders take no segment ids (GPT-2 would embed them)
        enc = {k: enc[k] for k in ("input_ids", "attention_mask")}
    with torch.inference_mode():
        out = eager(**enc, output_attentions=True)
    return out.attentions, enc["attention_mask"]


def check_invariants(layer, rows: slice) -> None:
    """Rows of allowed keys sum to 1, masked cells are exactly 0, nothing is NaN."""
    for h in range(layer.n_heads):
        w = layer.block("weights", h, rows)  # [r, k]
        allowed = layer.block("mask", h, rows)  # [r, k]
        assert not torch.isnan(w).any()
        assert torch.all(w[~allowed] == 0)
        live = allowed.any(-1)
        torch.testing.assert_close(w[live].sum(-1), torch.ones(int(live.sum())), atol=1e-5, rtol=0)


@pytest.mark.parametrize("n", [64, 1024])
def test_lean_weights_equal_hf_eager_for_every_family(family, tokenizer, lean, n):
    name, model, eager = family
    trace = trace_model(model, words(2 * n), max_length=n)
    assert trace.meta["lean"] and all(layer.in_bands for layer in trace.layers)
    assert trace.truncated and len(trace.tokens) == n
    ref, _ = eager_attentions(eager, model.call_tokenizer, [words(2 * n)], n)
    for i, layer in enumerate(trace.layers):
        assert isinstance(layer.rule, MaskRule)
        want = ref[i][0]  # [head, q, k]
        torch.testing.assert_close(layer.weights, want, atol=ATOL, rtol=0)
        check_invariants(layer, slice(None))
        if name in WINDOWED and i in WINDOWED[name]:
            assert layer.rule.window == WINDOW


def test_lean_padded_batch_matches_hf_eager(family, tokenizer, lean):
    name, model, eager = family
    traces = padded_traces(model, TEXTS)
    ref, attention = eager_attentions(eager, model.call_tokenizer, TEXTS, 64)
    for b, trace in enumerate(traces):
        for i, layer in enumerate(trace.layers):
            assert layer.in_bands
            live = layer.mask.any(-1)  # eager spreads a row with no key uniformly; attnviz: 0
            torch.testing.assert_close(
                layer.weights[:, live], ref[i][b][:, live], atol=ATOL, rtol=0
            )
            assert torch.all(layer.weights[:, ~live] == 0)


@pytest.mark.parametrize("name", ["llama", "mistral", "bert"])
def test_blocks_of_a_4096_token_input_equal_hf_eager(name, tmp_path, tokenizer, lean):
    model, eager = _build(name, tmp_path, tokenizer)
    if name == "mistral":
        eager.config.sliding_window = model.model.config.sliding_window = 1000
    n = 4096
    trace = trace_model(model, words(n + 10), max_length=n)
    ref, _ = eager_attentions(eager, model.call_tokenizer, [words(n + 10)], n)
    blocks = [(slice(0, 64), slice(None)), (slice(2000, 2512), slice(1500, 2100)),
              (slice(n - 40, n), slice(None))]  # fmt: skip
    for i, layer in enumerate(trace.layers):
        for rows, cols in blocks:
            for h in (0, layer.n_heads - 1):
                got = layer.block("weights", h, rows, cols)
                torch.testing.assert_close(got, ref[i][0, h][rows][:, cols], atol=ATOL, rtol=0)
        check_invariants(layer, slice(n - 40, n))
    del ref


def test_every_knob_keeps_its_meaning_in_a_lean_trace(monkeypatch, tmp_path, tokenizer):
    model, _ = _build("llama", tmp_path, tokenizer)
    knobs = dict(use_scale=False, temperature=2.0, ablate=[(0, 1), (1, 3)], mask_tokens=[2, 7])
    text = words(300)
    set_full_bytes(monkeypatch, 1)
    lean, lean_plain = trace_model(model, text, **knobs), trace_model(model, text)
    set_full_bytes(monkeypatch, 2**40)
    full, full_plain = trace_model(model, text, **knobs), trace_model(model, text)
    set_full_bytes(monkeypatch, None)
    assert lean.meta["lean"] and not full.meta["lean"]
    for a, b in zip(lean.layers, full.layers, strict=True):
        assert a.scale == b.scale == pytest.approx(1 / 2.0)
        for field in ("weights", "scores", "z", "output", "q", "k", "v", "mask"):
            torch.testing.assert_close(getattr(a, field), getattr(b, field), atol=ATOL, rtol=0)
        assert torch.all(a.weights[..., [2, 7]] == 0)
        torch.testing.assert_close(a.block("logits", 1), b.head_logits(1), atol=ATOL, rtol=0)
    assert torch.all(lean.layers[0].z[1] == 0) and torch.all(lean.layers[1].z[3] == 0)
    torch.testing.assert_close(lean.next_logits, full.next_logits, atol=ATOL, rtol=0)
    assert not torch.allclose(lean.next_logits, lean_plain.next_logits, atol=1e-3)
    torch.testing.assert_close(lean_plain.next_logits, full_plain.next_logits, atol=ATOL, rtol=0)
    # the overview's pooled mosaic is the same numbers, computed a band of rows at a time
    for size in (16, 37, 300):
        torch.testing.assert_close(
            pooled_weights(lean, size, size), pooled_weights(full, size, size), atol=1e-6, rtol=0
        )
    assert lean.nbytes() * 5 < full.nbytes()


def test_lean_attention_matches_sdpa_and_handles_rows_with_no_key() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 70, 8, generator=g) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # GQA: two query heads per K/V head
    keys = torch.ones(2, 70, dtype=torch.bool)
    keys[1, :5] = False  # item 1: its first queries (causal) see no key at all
    rule = MaskRule(70, 70, causal=True, window=9, keys=keys)
    z, lse = attend_lean(q, k, v, rule, 0.3)
    allowed = torch.stack([rule.allowed(torch.arange(70), torch.arange(70), b) for b in (0, 1)])
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed.unsqueeze(1), scale=0.3, enable_gqa=True
    )
    live = allowed.any(-1)  # [b, q]
    torch.testing.assert_close(z[0], want[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(z[1][:, live[1]], want[1][:, live[1]], atol=1e-6, rtol=0)
    assert torch.all(z[1][:, ~live[1]] == 0) and torch.all(lse[1][:, ~live[1]] == 0)
    for fast in (MaskRule(70, 70, causal=True), MaskRule(70, 70)):  # torch's fused kernel
        z, lse = attend_lean(q, k, v, fast, 0.3)
        logits = (q @ k.repeat_interleave(2, 1).transpose(-1, -2)) * 0.3
        logits = logits.masked_fill(~fast().expand_as(logits), float("-inf"))
        torch.testing.assert_close(lse, logits.logsumexp(-1), atol=1e-5, rtol=0)


def test_the_trace_budget_counts_the_real_length_and_lean_bytes(tmp_path, tokenizer) -> None:
    model, _ = _build("llama", tmp_path, tokenizer, positions=16_384)
    assert model.max_length == 16_384
    trace = trace_model(model, words(1030), max_length=1024)  # was refused as "72.4 GiB"
    assert len(trace.tokens) == 1024 and trace.truncated and trace.n_input_tokens > 1024
    short = trace_model(model, words(20))
    assert not short.meta["lean"] and not lean_trace(model, 1, 20)
    assert lean_trace(model, 1, 8192)
    # lean bytes grow with n, full bytes with n²
    a, b = (model_lean_bytes(4, 8, 2, 32, 1, n) for n in (4096, 8192))
    c, d = (model_trace_bytes(4, 8, 32, 1, n) for n in (4096, 8192))
    assert b - a < 1.1 * (a - model_lean_bytes(4, 8, 2, 32, 1, 0)) and d > 3.9 * c


def test_an_encoder_decoder_traces_lean(tmp_path, tokenizer, lean) -> None:
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=30522, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
        decoder_start_token_id=tokenizer.cls_token_id,
    )  # fmt: skip
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    eager = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    model = load_model(str(tmp_path), device="cpu")
    trace = trace_model(model, "the cat sat on the mat", "le chat")
    enc = tokenizer(["the cat sat on the mat"], return_tensors="pt")
    tgt = tokenizer(["le chat"], return_tensors="pt")["input_ids"]
    dec_ids = torch.cat([torch.full((1, 1), tokenizer.cls_token_id), tgt], 1)
    with torch.inference_mode():
        ref = eager(**enc, decoder_input_ids=dec_ids, output_attentions=True)
    for part, want in (("encoder", ref.encoder_attentions), ("decoder", ref.decoder_attentions),
                       ("cross", ref.cross_attentions)):  # fmt: skip
        layer = trace.part(part).layers[0]
        assert layer.in_bands
        torch.testing.assert_close(layer.weights, want[0][0], atol=ATOL, rtol=0)
