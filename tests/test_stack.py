"""The toy stack against torch's scaled_dot_product_attention and its own invariants."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from attnviz import StackConfig, Trace, trace_text
from attnviz.engine.attention import attend
from attnviz.engine.stack import build_weights, run_stack
from attnviz.engine.tokenize import tokenize
from attnviz.lessons.sharing import expand_to_mha
from attnviz.measures.stats import head_stats

SENTENCE = "The animal didn't cross the street because it was too tired"


def random_configs(n: int = 24) -> list[StackConfig]:
    rng = random.Random(1234)
    configs = []
    for i in range(n):
        n_heads = rng.choice([1, 2, 4, 6, 8])
        n_kv = rng.choice([d for d in range(1, n_heads + 1) if n_heads % d == 0])
        d_head = rng.choice([None, 3, 8, 24])  # None: d_model // n_heads
        d_model = n_heads * rng.choice([4, 8, 16]) if d_head is None else rng.choice([12, 32, 40])
        configs.append(
            StackConfig(
                d_model=d_model,
                n_heads=n_heads,
                d_head=d_head,
                n_kv_heads=n_kv,
                n_layers=rng.choice([1, 2, 3]),
                use_scale=rng.random() < 0.5,
                temperature=rng.choice([1.0, 0.5, 2.0]),
                causal=rng.random() < 0.5,
                add_norm=rng.random() < 0.5,
                ffn=rng.random() < 0.5,
                share_weights=rng.random() < 0.3,
                positional=rng.choice(["sinusoidal", "none"]),
                seed=i,
            )
        )
    return configs


@pytest.mark.parametrize("config", random_configs(), ids=lambda c: f"{c.sharing}-h{c.n_heads}")
def test_every_layer_matches_torch_sdpa(config: StackConfig) -> None:
    trace = trace_text(SENTENCE, config)
    assert len(trace.layers) == config.n_layers
    n = len(trace.tokens)
    for layer in trace.layers:
        assert layer.q.shape == (config.n_heads, n, config.d_head)
        assert layer.k.shape == (config.n_kv_heads, n, config.d_head)
        assert layer.v.shape == (config.n_kv_heads, n, config.d_head)
        assert layer.output.shape == (n, config.d_model)
        assert layer.scale == pytest.approx(config.scale)
        expected_scale = (config.d_head**-0.5 if config.use_scale else 1.0) / config.temperature
        assert layer.scale == pytest.approx(expected_scale)
        # Oracle: torch's own SDPA, on the trace's own q, k, v.
        z_ref = F.scaled_dot_product_attention(
            layer.q, layer.k, layer.v, is_causal=config.causal, scale=layer.scale, enable_gqa=True
        )
        torch.testing.assert_close(layer.z, z_ref, atol=1e-5, rtol=1e-5)
        # SDPA gives no weights; recover them by attending to an identity "value" per key.
        group = config.n_heads // config.n_kv_heads
        eye = torch.eye(n).expand(config.n_kv_heads, n, n)  # [kv_head, k, k]
        w_ref = F.scaled_dot_product_attention(
            layer.q,
            layer.k,
            eye.contiguous(),
            is_causal=config.causal,
            scale=layer.scale,
            enable_gqa=True,
        )  # [head, q, k]
        torch.testing.assert_close(layer.weights, w_ref, atol=1e-5, rtol=1e-5)
        k_full = layer.k.repeat_interleave(group, dim=0)
        torch.testing.assert_close(layer.scores, layer.q @ k_full.transpose(-1, -2))
        torch.testing.assert_close(layer.weights.sum(-1), torch.ones(config.n_heads, n))
        if config.causal:
            assert layer.mask is not None
            assert bool((layer.weights[:, ~layer.mask] == 0).all())
            assert bool((layer.weights.triu(1) == 0).all())
        else:
            assert layer.mask is None


@pytest.mark.parametrize("n_kv", [1, 2, 4])
def test_gqa_equals_mha_with_repeated_kv_weights(n_kv: int) -> None:
    gqa = StackConfig(d_model=32, n_heads=4, n_kv_heads=n_kv, n_layers=2, add_norm=True, seed=7)
    mha = StackConfig(d_model=32, n_heads=4, n_layers=2, add_norm=True, seed=7)
    weights = build_weights(gqa)
    tokens = tokenize(SENTENCE)
    g = run_stack(tokens, gqa, weights)
    m = run_stack(tokens, mha, [expand_to_mha(w, gqa) for w in weights])
    for lg, lm in zip(g.layers, m.layers, strict=True):
        torch.testing.assert_close(lg.weights, lm.weights, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(lg.output, lm.output, atol=1e-6, rtol=1e-5)
    assert gqa.sharing == {1: "MQA", 2: "GQA", 4: "MHA"}[n_kv]


def test_gqa_with_one_group_is_mqa_and_all_heads_share_k() -> None:
    trace = trace_text(SENTENCE, StackConfig(d_model=32, n_heads=4, n_kv_heads=1))
    layer = trace.layers[0]
    assert layer.k.shape[0] == 1
    # With one K for all heads, the scores differ between heads only through q.
    torch.testing.assert_close(layer.scores[2], layer.q[2] @ layer.k[0].T)


def test_gqa_grouping_is_h_floordiv_group() -> None:
    # Query head h uses kv head h // (n_heads // n_kv_heads): heads 0,1,2 -> kv 0; 3,4,5 -> kv 1.
    q = torch.randn(6, 3, 4)
    k = torch.randn(2, 5, 4)
    v = torch.randn(2, 5, 4)
    att = attend(q, k, v, scale=0.5)
    for h in range(6):
        torch.testing.assert_close(att.scores[h], q[h] @ k[h // 3].T)


@pytest.mark.parametrize("positional", ["none", "sinusoidal"])
def test_order_blindness_without_positional_encoding(positional: str) -> None:
    config = StackConfig(d_model=32, n_heads=4, n_layers=2, positional=positional, seed=3)
    tokens = ["dog", "bites", "man", "today"]
    perm = [2, 1, 0, 3]  # "man bites dog today"
    a = run_stack(tokens, config)
    b = run_stack([tokens[i] for i in perm], config)
    same = torch.allclose(a.layers[-1].output[perm], b.layers[-1].output, atol=1e-5)
    assert same == (positional == "none")


def test_same_seed_same_trace_and_other_seed_differs() -> None:
    config = StackConfig(d_model=32, n_heads=4, n_layers=2, ffn=True, add_norm=True, seed=11)
    a, b = trace_text("我爱水课", config), trace_text("我爱水课", config)
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert torch.equal(la.weights, lb.weights) and torch.equal(la.output, lb.output)
    c = trace_text("我爱水课", StackConfig(d_model=32, n_heads=4, n_layers=2, seed=12))
    assert not torch.allclose(a.layers[0].weights, c.layers[0].weights)


def test_same_token_same_vector_across_configs() -> None:
    a = trace_text("cat sat cat", StackConfig(d_model=16, n_heads=2, positional="none", seed=5))
    b = trace_text("the cat", StackConfig(d_model=16, n_heads=4, positional="none", seed=5))
    x_a, x_b = a.layers[0].x, b.layers[0].x
    torch.testing.assert_close(x_a[0], x_a[2])
    torch.testing.assert_close(x_a[0], x_b[1])


def test_weight_sharing_reuses_layer_zero() -> None:
    config = StackConfig(d_model=16, n_heads=2, n_layers=3, share_weights=True)
    weights = build_weights(config)
    assert weights[0] is weights[1] is weights[2]
    distinct = build_weights(StackConfig(d_model=16, n_heads=2, n_layers=3))
    assert not torch.equal(distinct[0].w_q, distinct[1].w_q)


def test_add_norm_gives_layernormed_hidden_states() -> None:
    trace = trace_text(SENTENCE, StackConfig(d_model=32, n_heads=4, add_norm=True, ffn=True))
    hidden = trace.hidden
    torch.testing.assert_close(hidden.mean(-1), torch.zeros(hidden.shape[0]), atol=1e-5, rtol=0)
    var = hidden.var(-1, unbiased=False)
    torch.testing.assert_close(var, torch.ones_like(var), atol=1e-3, rtol=0)


def test_cross_attention_queries_from_text_keys_from_pair() -> None:
    config = StackConfig(d_model=32, n_heads=4, n_kv_heads=2, causal=True)
    trace = trace_text("I love cats", config, text_pair="我爱猫咪啊")
    layer = trace.layers[0]
    assert trace.tokens == ["I", "love", "cats"] and trace.key_tokens == list("我爱猫咪啊")
    assert trace.is_cross
    assert layer.q.shape == (4, 3, 8) and layer.k.shape == (2, 5, 8)
    assert layer.weights.shape == (4, 3, 5) and layer.mask is None  # causal is self-attention only
    z_ref = F.scaled_dot_product_attention(
        layer.q, layer.k, layer.v, scale=layer.scale, enable_gqa=True
    )
    torch.testing.assert_close(layer.z, z_ref, atol=1e-5, rtol=1e-5)


def test_padding_mask_gives_pad_keys_exactly_zero() -> None:
    trace = trace_text("a short one", StackConfig(d_model=16, n_heads=2, causal=True), pad_to=6)
    assert trace.tokens[3:] == ["[PAD]"] * 3 and trace.special["[PAD]"] == [3, 4, 5]
    for layer in trace.layers:
        assert bool((layer.weights[..., 3:] == 0).all())
        torch.testing.assert_close(layer.weights.sum(-1), torch.ones(2, 6))


def test_fully_masked_row_is_zero_not_nan() -> None:
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    att = attend(q, k, v, mask=mask, scale=0.5)
    assert not torch.isnan(att.weights).any() and not torch.isnan(att.z).any()
    assert bool((att.weights[:, 1] == 0).all()) and bool((att.weights[:, ~mask] == 0).all())
    torch.testing.assert_close(att.weights[:, [0, 2]].sum(-1), torch.ones(2, 2))


def test_long_text_is_truncated_and_reported() -> None:
    trace = trace_text("word " * 600, StackConfig(d_model=16, n_heads=2))
    assert len(trace.tokens) == 512 and trace.truncated and trace.n_input_tokens == 600
    short = trace_text("word " * 10, StackConfig(d_model=16, n_heads=2))
    assert not short.truncated and short.n_input_tokens == 10


def test_tokenizer_cjk_words_punctuation_emoji() -> None:
    assert tokenize("我爱水课") == ["我", "爱", "水", "课"]
    assert tokenize("it's tired.") == ["it's", "tired", "."]
    assert tokenize("Hello世界!") == ["Hello", "世", "界", "!"]
    assert tokenize("猫😀") == ["猫", "😀"]
    assert tokenize("<b>x</b>") == ["<", "b", ">", "x", "<", "/", "b", ">"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_raises_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        trace_text(text, StackConfig())


@pytest.mark.parametrize(
    ("kwargs", "hint"),
    [
        ({"d_model": 64, "n_heads": 6}, "pick 1, 2, 4, 8, 16, 32 or 64"),
        ({"d_model": 64, "n_heads": 8, "n_kv_heads": 3}, "pick 1, 2, 4 or 8"),
        ({"d_model": 0}, "at least 1"),
        ({"n_heads": -2}, "at least 1"),
        ({"d_head": 0}, "at least 1"),
        ({"n_layers": 0}, "at least 1"),
        ({"temperature": 0}, "above 0"),
        ({"positional": "rope"}, "sinusoidal"),
        ({"n_kv_heads": 8, "n_heads": 4}, "does not divide"),
    ],
)
def test_bad_configs_say_what_to_change(kwargs: dict, hint: str) -> None:
    with pytest.raises(ValueError, match=hint):
        StackConfig(**kwargs)


def test_d_head_may_be_anything_when_given() -> None:
    config = StackConfig(d_model=64, n_heads=6, d_head=10)
    trace = trace_text("one two three", config)
    assert trace.layers[0].q.shape == (6, 3, 10)
    assert trace.layers[0].output.shape == (3, 64)


def test_head_stats_on_known_patterns() -> None:
    n = 5
    uniform = torch.full((1, n, n), 1.0 / n)
    identity = torch.eye(n).unsqueeze(0)
    layers = []
    for w in (uniform, identity):
        zeros = torch.zeros(1, n, 2)
        from attnviz.engine.trace import LayerTrace

        layers.append(LayerTrace(zeros, zeros, zeros, w, 1.0, None, w, zeros, zeros[0]))
    stats = head_stats(Trace(tokens=list("abcde"), layers=layers, source="test"))
    torch.testing.assert_close(stats["entropy_rel"][:, 0], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(stats["max_weight"][:, 0], torch.tensor([0.2, 1.0]))
    torch.testing.assert_close(stats["self"][:, 0], torch.tensor([0.2, 1.0]))
    torch.testing.assert_close(stats["prev"][:, 0], torch.tensor([0.2, 0.0]))
    torch.testing.assert_close(stats["first"][:, 0], torch.tensor([0.2, 0.2]))
    # mean |i-j| under uniform weights over 5 positions: (10+7+6+7+10)/25 = 1.6
    torch.testing.assert_close(stats["distance"][:, 0], torch.tensor([1.6, 0.0]))


def test_scaling_off_sharpens_the_weights() -> None:
    on = trace_text(SENTENCE, StackConfig(d_model=256, n_heads=2, use_scale=True))
    off = trace_text(SENTENCE, StackConfig(d_model=256, n_heads=2, use_scale=False))
    assert head_stats(off)["max_weight"].mean() > head_stats(on)["max_weight"].mean() + 0.2
    assert head_stats(off)["entropy"].mean() < head_stats(on)["entropy"].mean()


def test_import_attnviz_does_not_import_streamlit() -> None:
    code = (
        "import sys, attnviz, attnviz.views.panels, attnviz.views.frames; "
        "print('streamlit' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
