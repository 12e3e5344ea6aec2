"""moved (value-weighted attention, Kobayashi et al. 2020): alpha_ij * ||W_O^h v_j^h||, checked
against Hugging Face's eager attention read with forward hooks (the weights from
output_attentions, v from the value projection, W_O from the model) on the bundled encoder and
character decoder and on tiny random GQA Llama, GPT-2, Gemma 3 and BART; and its invariants."""

from __future__ import annotations

import pytest
import torch

import attnviz.engine.budget as budget_module
from attnviz import StackConfig, special_share, trace_text
from attnviz.engine.external import trace_from_attentions
from attnviz.engine.hooked import load_model, trace_model
from attnviz.engine.stack import build_weights
from tests.writes_models import PATHS, bundled, eager_inputs, gemma3_family, get, make_pair

ATOL = 1e-4
TEXT = "The animal didn't cross the street because it was too tired."
ZH = "狗咬人，人咬狗。"
PAIRS = ["minilm", "char", "llama", "gpt2", "gemma3_text", "bart"]


@pytest.fixture(scope="module", params=PAIRS)
def pair(request, tmp_path_factory):
    with gemma3_family():
        yield make_pair(request.param, tmp_path_factory)


def _norms(v: torch.Tensor, w_o: torch.Tensor, n_heads: int) -> torch.Tensor:
    """||W_O^h v_j|| from a value projection's output v [n, kv * d] and W_O [h * d, d_model]."""
    d = w_o.shape[0] // n_heads
    v = v.reshape(v.shape[0], -1, d).transpose(0, 1)  # [kv, n, d]
    group = n_heads // v.shape[0]
    return torch.stack([(v[h // group] @ w_o[h * d : (h + 1) * d]).norm(dim=-1)
                        for h in range(n_heads)])  # [head, n]  # fmt: skip


def eager_moved(pair, inputs: dict, stack: str = "main") -> list[torch.Tensor]:
    """Every layer's moved [head, q, k] from the eager model: "main" (the encoder, or a decoder's
    self-attention; BART's encoder), or BART's "decoder" and "cross"."""
    layers_path, v_path, o_path, _ = PATHS[pair.family]
    key = {"main": "attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}
    if pair.family == "bart":
        layers_path = "model.encoder.layers" if stack == "main" else layers_path
        if stack == "cross":
            v_path, o_path = "encoder_attn.v_proj", "encoder_attn.out_proj"
        key["main"] = "encoder_attentions"
    layers = get(pair.eager, layers_path)
    got = {}
    hooks = [
        get(layer, v_path).register_forward_hook(lambda m, a, o, i=i: got.__setitem__(i, o[0]))
        for i, layer in enumerate(layers)
    ]
    with torch.inference_mode():
        out = pair.eager(**inputs, output_attentions=True)
    for hook in hooks:
        hook.remove()
    moved = []
    for i, layer in enumerate(layers):
        w_o = get(layer, o_path)
        w = w_o.weight if type(w_o).__name__ == "Conv1D" else w_o.weight.T  # [h * d, d_model]
        weights = getattr(out, key[stack])[i][0]  # [head, q, k]
        v = got[i][:, -w.shape[1] :] if pair.family == "gpt2" else got[i]  # GPT-2: q | k | v
        moved.append(weights * _norms(v, w, weights.shape[0]).unsqueeze(1))
    return moved


def test_moved_matches_hf_eager(pair):
    text = ZH if pair.model.name == "attnviz-char-zh-en" else TEXT
    with gemma3_family():
        trace = trace_model(pair.model, text)
    inputs = eager_inputs(pair, text)
    stacks = {"main": trace}
    if pair.family == "bart":
        stacks |= {"decoder": trace.part("decoder"), "cross": trace.part("cross")}
    for stack, traced in stacks.items():
        want = eager_moved(pair, inputs, stack)
        assert len(want) == traced.n_layers
        for layer, w in zip(traced.layers, want, strict=True):
            assert layer.f_norm.shape == (layer.n_heads, layer.n_k)  # O(n) stored per head
            torch.testing.assert_close(layer.moved, w, atol=ATOL, rtol=0)
            torch.testing.assert_close(
                layer.block("moved", 1, slice(1, 4), slice(0, 3)), w[1, 1:4, 0:3], atol=ATOL, rtol=0
            )
            torch.testing.assert_close(layer.head("moved", 2), w[2], atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def char():
    return bundled("char")


def _lean(monkeypatch, on: bool) -> None:
    if on:
        monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    else:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES", raising=False)
    budget_module.budget.cache_clear()


def test_lean_moved_is_the_full_one_and_stores_no_n_by_n(char, monkeypatch):
    full = trace_model(char.model, ZH * 4)
    _lean(monkeypatch, True)
    try:
        lean = trace_model(char.model, ZH * 4)
    finally:
        _lean(monkeypatch, False)
    n = len(lean.tokens)
    for a, b in zip(full.layers, lean.layers, strict=True):
        assert b.in_bands and not a.in_bands
        stored = [t for t in b.__dict__.values() if isinstance(t, torch.Tensor)]
        assert all(t.dim() < 2 or tuple(t.shape[-2:]) != (n, n) for t in stored)
        torch.testing.assert_close(b.f_norm, a.f_norm, atol=ATOL, rtol=0)
        rows, cols = torch.tensor([3, 0, 17]), slice(2, 20)
        torch.testing.assert_close(b.block("moved", 5, rows, cols), a.moved[5][rows][:, cols],
                                   atol=ATOL, rtol=0)  # fmt: skip
        torch.testing.assert_close(b.head("moved", 0), a.head("moved", 0), atol=ATOL, rtol=0)


def test_a_silenced_head_moves_nothing(char):
    base = trace_model(char.model, ZH)
    off = trace_model(char.model, ZH, ablate=[(1, 2)])
    assert torch.equal(off.layers[1].f_norm[2], torch.zeros(off.layers[1].n_k))
    assert torch.equal(off.layers[1].moved[2], torch.zeros_like(off.layers[1].moved[2]))
    torch.testing.assert_close(off.layers[1].weights, base.layers[1].weights)  # it still looks
    assert bool((off.layers[1].moved[3] > 0).any())


def test_a_head_output_is_at_most_what_it_moves(char):
    """||z_i W_O^h|| = ||sum_j alpha_ij f(x_j)|| <= sum_j moved[i, j] (the triangle inequality)."""
    trace = trace_model(char.model, ZH)
    for i, layer in enumerate(trace.layers):
        w_o = char.model.blocks[i].w_o.weight.T  # [h * d, d_model]
        d = layer.z.shape[-1]
        for h in range(layer.n_heads):
            out = (layer.z[h] @ w_o[h * d : (h + 1) * d]).norm(dim=-1)  # [q]
            assert bool((out <= layer.moved[h].sum(-1) * (1 + 1e-5) + 1e-6).all())


def test_stack_moved_from_its_own_weights():
    config = StackConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, causal=True)
    trace = trace_text("the cat sat on the mat", config)
    for layer, w in zip(trace.layers, build_weights(config), strict=True):
        norms = torch.stack([
            (layer.v[h // 2] @ w.w_o[h * 8 : (h + 1) * 8]).norm(dim=-1) for h in range(4)
        ])  # [head, k]  # fmt: skip
        torch.testing.assert_close(layer.moved, layer.weights * norms.unsqueeze(1))
        assert layer.moved.triu(1).abs().max() == 0  # masked keys move nothing


def test_special_share_is_the_ratio_of_sums(monkeypatch):
    enc = load_model(device="cpu")
    trace = trace_model(enc, TEXT)
    table = special_share(trace)
    assert list(table.columns) == [
        "layer",
        "head",
        "weights_special",
        "moved_special",
        "weights_punct",
        "moved_punct",
        "weights_both",
        "moved_both",
    ]
    specials = trace.special["[CLS]"] + trace.special["[SEP]"]
    punct = [j for j, t in enumerate(trace.tokens) if t in (".", "'")]
    for row in table.itertuples():
        layer = trace.layers[row.layer]
        w, m = layer.weights[row.head], layer.moved[row.head]  # [q, k]
        assert row.weights_special == pytest.approx(float(w[:, specials].sum() / w.sum()), 1e-5)
        assert row.moved_special == pytest.approx(float(m[:, specials].sum() / m.sum()), 1e-5)
        assert row.moved_punct == pytest.approx(float(m[:, punct].sum() / m.sum()), 1e-5)
    _lean(monkeypatch, True)
    try:
        lean = special_share(trace_model(enc, TEXT))
    finally:
        _lean(monkeypatch, False)
    for col in table.columns[2:]:
        assert table[col].to_numpy() == pytest.approx(lean[col].to_numpy(), abs=1e-5)


def test_moved_of_a_trace_without_values_says_why():
    weights = torch.softmax(torch.randn(1, 2, 3, 3), -1)
    trace = trace_from_attentions((weights,), ["a", "b", "c"])
    with pytest.raises(ValueError, match="per-key norms"):
        trace.layers[0].moved  # noqa: B018
