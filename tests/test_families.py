"""Decoders (GPT-2, Llama with GQA, Qwen2, Mistral with a sliding window, ...) and an
encoder-decoder (BART), traced through AttentionInterface and checked against the same model run
with Hugging Face's eager attention. Every model is tiny, random and built from its config class
(no download), saved with the bundled tokenizer."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    BartConfig,
    Gemma3TextConfig,
    GemmaConfig,
    GPT2Config,
    GraniteConfig,
    LlamaConfig,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen2Config,
    Qwen3Config,
)

from attnviz.engine.hooked import load_model, resolve, trace_model
from tests.padded import padded_traces

ATOL = 1e-5
TEXTS = ["the cat sat on the mat and then it slept", "a dog ran"]
WINDOW = 3
SMALL = dict(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2)
ROPE = dict(SMALL, num_attention_heads=4, max_position_embeddings=64)
CONFIGS = {
    "gpt2": lambda: GPT2Config(vocab_size=30522, n_embd=32, n_layer=2, n_head=4, n_positions=64),
    "llama": lambda: LlamaConfig(**ROPE, num_key_value_heads=2),  # GQA: 2 query heads per kv
    "qwen2": lambda: Qwen2Config(
        **ROPE,
        num_key_value_heads=1,  # MQA
        use_sliding_window=True,
        sliding_window=WINDOW,
        layer_types=["full_attention", "sliding_attention"],
    ),
    "mistral": lambda: MistralConfig(**ROPE, num_key_value_heads=2, sliding_window=WINDOW),
    "gemma": lambda: GemmaConfig(**ROPE, num_key_value_heads=1, head_dim=8),
    # Gemma 3: q/k norms, a sliding-window layer, and its own query scaling (query_pre_attn_scalar
    # 32 with d_head 8: scale 1/sqrt(32), not 1/sqrt(8)); the window last, as for qwen2, so that
    # padded rows left with no key (zeros here, uniform in eager) feed no later layer
    "gemma3_text": lambda: Gemma3TextConfig(
        **ROPE,
        num_key_value_heads=1,
        head_dim=8,
        query_pre_attn_scalar=32,
        sliding_window=WINDOW,
        layer_types=["full_attention", "sliding_attention"],
    ),
    "qwen3": lambda: Qwen3Config(**ROPE, num_key_value_heads=2, head_dim=8),
    "phi3": lambda: Phi3Config(**ROPE, num_key_value_heads=2, pad_token_id=0),
    "olmo2": lambda: Olmo2Config(**ROPE, num_key_value_heads=2, pad_token_id=0),
    "granite": lambda: GraniteConfig(**ROPE, num_key_value_heads=2, attention_multiplier=0.2),
}
# Which layers see only the last WINDOW keys.
WINDOWED = {"mistral": {0, 1}, "qwen2": {1}, "gemma3_text": {1}}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve(None)[0])


def save(folder, model, tokenizer) -> str:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def decoder(request, tmp_path_factory, tokenizer):
    """(family, folder, loaded model, the same weights with HF eager attention)."""
    family = request.param
    torch.manual_seed(0)
    config = CONFIGS[family]()
    folder = save(
        tmp_path_factory.mktemp(family), AutoModelForCausalLM.from_config(config), tokenizer
    )
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    return family, folder, load_model(folder, device="cpu"), eager


def eager_run(model, tokenizer, texts, **extra):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return model(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            output_attentions=True,
            output_hidden_states=True,
            **extra,
        ), enc["attention_mask"]


def expected_mask(n: int, length: int, window: int | None) -> torch.Tensor:
    q = torch.arange(n).unsqueeze(1)  # [q, 1]
    k = torch.arange(n).unsqueeze(0)  # [1, k]
    mask = (k <= q) & (k < length)  # [q, k] causal, padded keys out
    if window is not None:
        mask &= q - k < window
    return mask


def test_decoder_matches_hf_eager(decoder, tokenizer):
    family, _, model, eager = decoder
    traces = padded_traces(model, TEXTS)
    ref, attention = eager_run(eager, model.call_tokenizer, TEXTS)
    config = eager.config
    n_kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert model.kind == "decoder" and model.n_layers == 2 and model.n_heads == 4
    assert (model.n_kv_heads or model.n_heads) == n_kv and model.d_head == d_head
    for b, trace in enumerate(traces):
        n, length = len(trace.tokens), int(attention[b].sum())
        assert trace.special["[PAD]"] == list(range(length, n))
        for i, layer in enumerate(trace.layers):
            # A padded query far past a window has no key left: eager spreads it uniformly over
            # masked keys, attnviz gives it zeros (its documented rule); real rows must agree.
            live = layer.mask.any(-1)  # [q]
            assert live[:length].all() and torch.all(layer.weights[:, ~live] == 0)
            want = ref.attentions[i][b][:, live]  # [head, live q, k]
            torch.testing.assert_close(layer.weights[:, live], want, atol=ATOL, rtol=0)
            assert layer.q.shape == (4, n, d_head)
            assert layer.k.shape == layer.v.shape == (n_kv, n, d_head)  # not expanded
            window = WINDOW if i in WINDOWED.get(family, ()) else None
            assert torch.equal(layer.mask, expected_mask(n, length, window)), (family, i)
            assert torch.all(layer.weights[:, ~layer.mask] == 0)
            torch.testing.assert_close(layer.weights.sum(-1), live.float().expand(4, n))
            # scores are the raw q·k of the rotated q and k; weights follow from them
            k_full = layer.k.repeat_interleave(4 // n_kv, dim=0)  # [head, n, d_head]
            torch.testing.assert_close(layer.scores, layer.q @ k_full.transpose(-1, -2))
            soft = torch.softmax(layer.logits()[:, live], -1)  # [head, live q, k]
            torch.testing.assert_close(layer.weights[:, live], soft)
            v_full = layer.v.repeat_interleave(4 // n_kv, dim=0)  # [head, n, d_head]
            torch.testing.assert_close(layer.z, layer.weights @ v_full)
        want = ref.hidden_states[-1][b, :length]  # [real n, d_model]
        torch.testing.assert_close(trace.hidden[:length], want, atol=ATOL, rtol=0)
        torch.testing.assert_close(trace.next_logits, ref.logits[b, length - 1], atol=ATOL, rtol=0)


def test_decoder_output_is_what_w_o_gives_the_residual(decoder):
    """`output` is the attention block's contribution: checked against a forward hook on the
    family's W_O module, i.e. what the model itself adds to the residual stream."""
    _, _, model, _ = decoder
    seen = {}
    hooks = [
        b.w_o.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o.detach().clone()))
        for i, b in enumerate(model.blocks)
    ]
    try:
        trace = trace_model(model, TEXTS[0])
    finally:
        for hook in hooks:
            hook.remove()
    for i, layer in enumerate(trace.layers):
        torch.testing.assert_close(layer.output, seen[i][0], atol=ATOL, rtol=0)


def test_decoder_knobs_change_the_next_token(decoder):
    _, _, model, _ = decoder
    base = trace_model(model, TEXTS[0])
    n = len(base.tokens)
    cold = trace_model(model, TEXTS[0], use_scale=False)
    warm = trace_model(model, TEXTS[0], temperature=3.0)
    cut = trace_model(model, TEXTS[0], ablate=[(1, 2)])
    hid = trace_model(model, TEXTS[0], mask_tokens=[n - 2])  # in every window's reach
    assert cold.layers[0].scale == 1.0
    assert warm.layers[0].scale == pytest.approx(base.layers[0].scale / 3)
    assert torch.all(cut.layers[1].z[2] == 0)
    torch.testing.assert_close(cut.layers[0].weights, base.layers[0].weights)
    for layer in hid.layers:
        assert torch.all(layer.weights[:, :, n - 2] == 0) and not layer.mask[:, n - 2].any()
    for other in (cold, warm, cut, hid):
        assert other.next_logits.shape == base.next_logits.shape
        assert not torch.allclose(other.next_logits, base.next_logits, atol=1e-6)
        torch.testing.assert_close(other.layers[0].weights.sum(-1), torch.ones(4, n))


def test_plain_call_is_plain_eager(decoder, tokenizer):
    """Without attnviz's keywords the loaded model is the model: logits equal HF eager."""
    _, _, model, eager = decoder
    enc = model.call_tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        mine = model.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    ref, attention = eager_run(eager, model.call_tokenizer, TEXTS)
    real = attention.bool()  # [batch, n] padded rows past a window differ (see above)
    torch.testing.assert_close(mine.logits[real], ref.logits[real], atol=ATOL, rtol=0)
    # One unpadded input keeps only the last position's logits: still the model's.
    alone = trace_model(model, TEXTS[1])
    n = len(alone.tokens)
    torch.testing.assert_close(alone.next_logits, ref.logits[1, n - 1], atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def bart(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=30522,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        decoder_start_token_id=tokenizer.cls_token_id,
    )
    folder = tmp_path_factory.mktemp("bart")
    save(folder, AutoModelForSeq2SeqLM.from_config(config), tokenizer)
    eager = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    return load_model(str(folder), device="cpu"), eager


def test_encoder_decoder_matches_hf_eager(bart, tokenizer):
    model, eager = bart
    source, targets = ["the cat sat on the mat", "a dog"], ["le chat", "un chien noir court"]
    traces = padded_traces(model, source, targets)
    enc = tokenizer(source, padding=True, return_tensors="pt")
    tgt = tokenizer(targets, padding=True, return_tensors="pt")
    start = torch.full((2, 1), tokenizer.cls_token_id)
    dec_ids = torch.cat([start, tgt["input_ids"]], 1)  # [batch, m]
    dec_mask = torch.cat([torch.ones_like(start), tgt["attention_mask"]], 1)  # [batch, m]
    with torch.inference_mode():
        ref = eager(
            **enc,
            decoder_input_ids=dec_ids,
            decoder_attention_mask=dec_mask,
            output_attentions=True,
            output_hidden_states=True,
        )
    assert model.kind == "encoder-decoder" and model.n_blocks == 6 and model.n_layers == 2
    for b, trace in enumerate(traces):
        dec, cross = trace.part("decoder"), trace.part("cross")
        assert trace.part("encoder") is trace and trace.meta["part"] == "encoder"
        assert dec.tokens == tokenizer.convert_ids_to_tokens(dec_ids[b])
        assert cross.tokens == dec.tokens and cross.key_tokens == trace.tokens and cross.is_cross
        n, m = len(trace.tokens), len(dec.tokens)
        n_src, n_tgt = int(enc["attention_mask"][b].sum()), int(dec_mask[b].sum())
        for name, got, want in (
            ("encoder", trace, ref.encoder_attentions),
            ("decoder", dec, ref.decoder_attentions),
            ("cross", cross, ref.cross_attentions),
        ):
            assert len(got.layers) == 2, name
            for i, layer in enumerate(got.layers):
                torch.testing.assert_close(layer.weights, want[i][b], atol=ATOL, rtol=0)
        full = torch.ones(n, n, dtype=torch.bool)
        full[:, n_src:] = False
        assert torch.equal(trace.layers[0].mask, full)
        assert torch.equal(dec.layers[0].mask, expected_mask(m, n_tgt, None))
        assert cross.layers[0].weights.shape == (4, m, n) and cross.layers[0].k.shape == (4, n, 8)
        assert torch.equal(cross.layers[0].mask, full[:1].expand(m, n))
        torch.testing.assert_close(
            trace.hidden, ref.encoder_last_hidden_state[b], atol=ATOL, rtol=0
        )
        torch.testing.assert_close(dec.next_logits, ref.logits[b, n_tgt - 1], atol=ATOL, rtol=0)
        want = ref.decoder_hidden_states[-1][b, :n_tgt]  # [real m, d_model]
        torch.testing.assert_close(dec.hidden[:n_tgt], want, atol=ATOL, rtol=0)
        assert torch.equal(cross.hidden, dec.hidden)


def test_encoder_decoder_knobs_number_blocks_in_order(bart):
    model, _ = bart
    base = trace_model(model, "the cat sat", "le chat")
    cut = trace_model(model, "the cat sat", "le chat", ablate=[(4, 1)], mask_tokens=[2])
    cross_base, cross_cut = base.part("cross"), cut.part("cross")
    assert cross_cut.meta["first_layer"] == 4 and base.part("decoder").meta["first_layer"] == 2
    assert torch.all(cross_cut.layers[0].z[1] == 0)
    assert not torch.equal(cross_cut.layers[0].z[0], cross_base.layers[0].z[0])  # key 2 hidden
    assert torch.all(cross_cut.layers[0].weights[:, :, 2] == 0)
    assert torch.all(cut.layers[0].weights[:, :, 2] == 0)
    # mask_tokens are source positions: the decoder's own keys stay visible
    assert torch.equal(cut.part("decoder").layers[0].mask, base.part("decoder").layers[0].mask)
    with pytest.raises(ValueError, match="layers 0..5"):
        trace_model(model, "the cat", ablate=[(6, 0)])


def test_model_over_the_memory_budget_is_refused_before_loading(tmp_path, monkeypatch, tokenizer):
    import attnviz.engine.budget

    config = LlamaConfig(**ROPE, num_key_value_heads=2)
    config.save_pretrained(tmp_path)  # a config alone: loading weights would fail
    tokenizer.save_pretrained(tmp_path)
    monkeypatch.setenv("ATTNVIZ_MAX_MODEL_BYTES", str(2**20))
    attnviz.engine.budget.budget.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"needs \d+\.\d MiB .* budget of 1\.0 MiB"):
            load_model(str(tmp_path))
    finally:
        attnviz.engine.budget.budget.cache_clear()


def test_bfloat16_option_traces_float32_close_to_the_exact_run(tmp_path, tokenizer) -> None:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS["llama"]())
    folder = save(tmp_path, model, tokenizer)
    exact = load_model(folder, device="cpu")
    half = load_model(folder, device="cpu", dtype="bfloat16")
    assert half.model.dtype == torch.bfloat16
    a, b = trace_model(exact, TEXTS[0]), trace_model(half, TEXTS[0])
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert lb.weights.dtype == lb.q.dtype == lb.output.dtype == torch.float32
        torch.testing.assert_close(lb.weights, la.weights, atol=2e-2, rtol=0)
    assert b.next_logits.dtype == torch.float32
    with pytest.raises(ValueError, match="dtype='int8'"):
        load_model(folder, dtype="int8")


def test_a_70b_config_is_sized_from_its_config_and_refused_at_once(tmp_path) -> None:
    """Llama-3-70B's shape: 70.6 B parameters, 262.8 GiB in float32, 131.4 GiB in bfloat16, over
    the default 8 GiB budget; the folder has no weights, so reading them would fail instead."""
    import time

    from attnviz.engine.budget import budget

    LlamaConfig(
        hidden_size=8192,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        intermediate_size=28672,
        vocab_size=128256,
    ).save_pretrained(tmp_path)
    if budget().max_model_bytes > 100 * 2**30:
        pytest.skip(f"ATTNVIZ_MAX_MODEL_BYTES={budget().max_model_bytes} lets 131 GiB through")
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"needs 262\.8\d GiB for its parameters in float32"):
        load_model(str(tmp_path), device="cpu")
    with pytest.raises(ValueError, match=r"needs 131\.4\d GiB for its parameters in bfloat16"):
        load_model(str(tmp_path), device="cpu", dtype="bfloat16")
    assert time.monotonic() - start < 20


def test_a_tokenizer_without_a_pad_token_still_pads_a_batch(tmp_path, tokenizer) -> None:
    """GPT-2's and Llama's tokenizers have no pad token: a batch pads with the end (here the
    unknown) token, and padding is read from the attention mask, not from the token."""
    import copy

    bare = copy.deepcopy(tokenizer)
    bare.pad_token = None
    torch.manual_seed(0)
    folder = save(tmp_path, AutoModelForCausalLM.from_config(CONFIGS["gpt2"]()), bare)
    model = load_model(folder, device="cpu")
    assert model.tokenizer.pad_token is None and model.call_tokenizer.pad_token is not None
    long, short = padded_traces(model, TEXTS)
    n = len(short.tokens)
    m = len(trace_model(model, TEXTS[1]).tokens)
    assert n == len(long.tokens) > m and short.special["[PAD]"] == list(range(m, n))
    for layer in short.layers:
        assert torch.all(layer.weights[:, :, m:] == 0)


def test_head_stats_use_each_layers_own_mask() -> None:
    """A model mixing full and sliding-window layers (Qwen2's layer_types): uniform weights over
    each layer's allowed keys have relative entropy 1 in both layers."""
    from attnviz.engine.trace import LayerTrace, Trace
    from attnviz.measures.stats import head_stats

    n = 6
    full = expected_mask(n, n, None)  # [q, k]
    window = expected_mask(n, n, 2)  # [q, k]
    layers = []
    for mask in (full, window):
        weights = (mask / mask.sum(-1, keepdim=True)).expand(2, n, n)  # [head, q, k] uniform
        zeros = torch.zeros(2, n, 4)
        layers.append(
            LayerTrace(
                q=zeros,
                k=zeros,
                v=zeros,
                scores=torch.zeros(2, n, n),
                scale=1.0,
                mask=mask,
                weights=weights,
                z=zeros,
                output=torch.zeros(n, 8),
            )  # fmt: skip
        )
    stats = head_stats(Trace(tokens=list("abcdef"), layers=layers, source="test"))
    torch.testing.assert_close(stats["entropy_rel"], torch.ones(2, 2))
    torch.testing.assert_close(stats["max_weight"][1], torch.full((2,), (1 + 5 * 0.5) / 6))
