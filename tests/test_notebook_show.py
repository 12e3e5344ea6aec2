"""attnviz.show in a notebook: one displayable object for every view, a static fallback in every
bundle, and the inputs a notebook user already has (a transformers model, (attentions, tokens))."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

import attnviz
from attnviz.engine.external import trace_from_attentions
from attnviz.views import registry
from attnviz.views.notebook import VIEWS, View

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace_text(TEXT, attnviz.StackConfig(d_model=16, n_heads=4, n_layers=2))


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    """A tiny random Llama saved with the bundled model's tokenizer (no download)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    attnviz.load_model(device="cpu").tokenizer.save_pretrained(folder)
    return folder


def _static(shown) -> None:
    """Every figure of a View carries Plotly's JSON and a well-formed static SVG that draws."""
    assert isinstance(shown, View) and len(shown) >= 1
    for fig in shown:
        bundle = View.bundle(fig)
        assert bundle["application/vnd.plotly.v1+json"]["data"]
        svg = ET.fromstring(bundle["image/svg+xml"])  # well-formed: a browser draws it
        assert svg.tag.endswith("svg")
        assert bundle["text/html"].startswith('<div class="attnviz-static"><svg')
        drawn = re.findall(r"<(image|path|rect|text)\b", bundle["image/svg+xml"])
        assert len(drawn) > 3, drawn  # more than the background and the title
    assert shown._repr_html_().count("<svg") == len(shown)


@pytest.mark.parametrize(
    "view", [v for v in VIEWS if registry.BY_NAME[v].needs not in ("model", "pair")]
)
def test_every_view_is_one_object_with_a_static_fallback(trace, view) -> None:
    other = attnviz.trace_text("the dog sat on the mat", trace_config(trace))
    extra = {"other": other} if view == "compare" else {}
    _static(attnviz.show(trace, view=view, layer=1, head=2, query=3, key=1, **extra))


def trace_config(trace):
    return attnviz.StackConfig(d_model=16, n_heads=4, n_layers=2)


@pytest.mark.parametrize("view", ["logits", "lens", "why"])
def test_the_model_views_draw_with_a_static_fallback_and_need_the_model(view) -> None:
    model = attnviz.load_model("attnviz-char-zh-en", device="cpu")
    trace = attnviz.trace_model(model, "the cat sat on the m")
    _static(attnviz.show(trace, view=view, model=model, field="moved", unit="word"))
    _static(attnviz.show(model, view=view, text="我爱水", lang="zh"))  # the model is the source
    with pytest.raises(TypeError, match=f"view='{view}' needs the model"):
        attnviz.show(trace, view=view)


def test_the_patch_view_draws_with_a_static_fallback_and_needs_model_and_other() -> None:
    model = attnviz.load_model("attnviz-char-zh-en", device="cpu")
    clean = "the cat sat on the mat, the cat sat on the m"
    _static(attnviz.show(model, view="patch", text=clean, other=clean.replace("cat", "dog", 1)))
    trace = attnviz.trace_model(model, clean)
    with pytest.raises(TypeError, match="view='patch' needs model= and other="):
        attnviz.show(trace, view="patch", other="the dog")


def test_the_static_fallback_escapes_tokens_and_draws_the_weights() -> None:
    evil = ["<b>x</b>", "<script>alert(1)</script>", "&amp;", "a"]
    w = torch.softmax(torch.randn(1, 2, 4, 4), -1)  # [batch, head, q, k]
    shown = attnviz.show(([w, w], evil), view="heads", layer=1)
    html = "".join(View.bundle(f)["text/html"] for f in shown)
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;" in html and ">2: &amp;amp;</text>" in html  # shows "&amp;" as typed


def test_attentions_and_tokens_from_any_forward(llama_folder) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(llama_folder)
    hf = AutoModelForCausalLM.from_pretrained(llama_folder, attn_implementation="eager")
    enc = tok(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = hf(**enc, output_attentions=True)
    tokens = tok.convert_ids_to_tokens(enc.input_ids[0])
    ext = trace_from_attentions(out.attentions, tokens)
    ours = attnviz.trace_model(attnviz.load_model(str(llama_folder), device="cpu"), TEXT)
    assert ext.tokens == ours.tokens
    for a, b in zip(ext.layers, ours.layers, strict=True):
        torch.testing.assert_close(a.weights, b.weights, atol=1e-5, rtol=0)  # oracle: HF eager
    lines = attnviz.show((out.attentions, tokens), view="lines", layer=1, head=3)
    assert lines.layout.meta["lines"] > 0
    with pytest.raises(ValueError, match="needs q, k and the raw scores"):
        attnviz.show(out.attentions, tokens=tokens, view="detail")
    with pytest.raises(ValueError, match="unknown"):
        _ = ext.layers[0].scores
    with pytest.raises(ValueError, match=r"shape \(4, 8, 8\) but the tokens make \[4, 3, 3\]"):
        trace_from_attentions(out.attentions, tokens[:3])
    with pytest.raises(ValueError, match="SDPA"):
        trace_from_attentions((None, None), tokens)
    with pytest.raises(ValueError, match="do not sum to 1"):
        trace_from_attentions([torch.ones(1, 4, 8, 8)], tokens)


def test_a_transformers_model_object_plus_text(llama_folder) -> None:
    hf = AutoModelForCausalLM.from_pretrained(llama_folder)  # sdpa: returns no weights itself
    shown = attnviz.show(hf, view="heads", text=TEXT, layer=1)
    assert len(shown) == 4
    model = attnviz.load_model(hf)  # the same object, switched to attnviz's attention in place
    assert model.model is hf and model.n_kv_heads == 2
    ref = attnviz.trace_model(attnviz.load_model(str(llama_folder), device="cpu"), TEXT)
    got = attnviz.trace_model(model, TEXT)
    torch.testing.assert_close(got.layers[1].weights, ref.layers[1].weights, atol=1e-6, rtol=0)
    assert [r.token for r in attnviz.next_tokens(model, got, k=3)] == [
        r.token for r in attnviz.next_tokens(model, ref, k=3)
    ]
    with pytest.raises(TypeError, match="transformers model object, not dict"):
        attnviz.load_model({"a": 1})
    with pytest.raises(TypeError, match="text=..."):
        attnviz.show(hf, view="heads")
