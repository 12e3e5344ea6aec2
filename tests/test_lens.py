"""head_logits (direct logit attribution) and logit_lens, recomputed from Hugging Face's eager
model read with forward hooks: each head's z (the input of W_O) and the final norm's input at the
position, the norm frozen there by hand for each family (LayerNorm: centred over its std; RMSNorm
over its rms; Gemma's (1 + w); Gemma 3's norm after attention; BART's post-LayerNorms), dotted
with the unembedding row. The rows add up to the model's logit."""

from __future__ import annotations

import pytest
import torch

import attnviz.engine.budget as budget_module
from attnviz.engine.hooked import load_model, trace_model
from attnviz.measures.lens import head_logits, logit_lens
from tests.writes_models import PATHS, bundled, eager_inputs, gemma3_family, get, make_pair

ATOL = 1e-4
SUM_ATOL = 1e-3
TEXT = "the cat sat on the mat and then it slept"
ZH = "狗咬人，人咬狗。我爱"
PAIRS = ["char", "llama", "gpt2", "gemma", "gemma3_text", "bart"]


@pytest.fixture(scope="module", params=PAIRS)
def pair(request, tmp_path_factory):
    with gemma3_family():
        yield make_pair(request.param, tmp_path_factory)


def text_of(pair) -> str:
    return ZH if pair.model.name == "attnviz-char-zh-en" else TEXT


def frozen(norm, x: torch.Tensor, family: str):
    """The oracle's norm frozen at x: (linear map, bias)."""
    x = x.double()
    w = norm.weight.double()
    if isinstance(norm, torch.nn.LayerNorm):
        s = (x.var(unbiased=False) + norm.eps).sqrt()
        return (lambda c: (c - c.mean()) / s * w), norm.bias.double()
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    s = (x.pow(2).mean() + eps).sqrt()
    if family.startswith("gemma"):
        w = 1 + w
    return (lambda c: c / s * w), torch.zeros_like(w)


def _capture(modules: dict, pos: int, got: dict) -> list:
    def hook(name):
        def read(m, args, out):
            got[name] = (args[0][0, pos].double(), out[0, pos].double())

        return read

    return [m.register_forward_hook(hook(n)) for n, m in modules.items()]


def eager_head_logits(pair, text: str, pos: int) -> tuple[dict, float, int]:
    """{(part, layer, head): logit} from the eager model, its logit of the top token and the
    token id, at position pos of the decoder's tokens."""
    fam, model = pair.family, pair.eager
    layers_path, _, o_path, norm_path = PATHS[fam]
    layers = get(model, layers_path)
    mods = {}
    for i, layer in enumerate(layers):
        mods[("decoder", i)] = get(layer, o_path)
        if fam == "bart":
            mods[("cross", i)] = layer.encoder_attn.out_proj
            for j, name in enumerate(("self_attn_layer_norm", "encoder_attn_layer_norm",
                                      "final_layer_norm")):  # fmt: skip
                mods[("norm", i, j)] = getattr(layer, name)
    if norm_path is not None:
        mods["final"] = get(model, norm_path)
    got = {}
    hooks = _capture(mods, pos, got)
    with torch.inference_mode():
        logits = model(**eager_inputs(pair, text)).logits[0, pos]
    for h in hooks:
        h.remove()
    token = int(logits.argmax())
    u = model.get_output_embeddings().weight[token].double()
    final = frozen(get(model, norm_path), got["final"][0], fam)[0] if norm_path else None
    out = {}
    n_heads = pair.model.n_heads
    for key, (z, o_out) in got.items():
        if key[0] not in ("decoder", "cross"):
            continue
        part, i = key
        w_o = mods[key]
        w = (w_o.weight if type(w_o).__name__ == "Conv1D" else w_o.weight.T).double()
        d = w.shape[0] // n_heads
        for h in range(n_heads):
            c = z[h * d : (h + 1) * d] @ w[h * d : (h + 1) * d]  # [d_model]
            if fam == "gemma3_text":  # its norm after attention, frozen at the block's output
                c = frozen(layers[i].post_attention_layernorm, o_out, fam)[0](c)
            if fam == "bart":  # every later post-LayerNorm, frozen at its own input
                steps = [(li, j) for li in range(len(layers)) for j in range(3)]
                first = 0 if part == "decoder" else 1
                for li, j in steps:
                    if (li, j) >= (i, first):
                        norm = mods[("norm", li, j)]
                        c = frozen(norm, got[("norm", li, j)][0], fam)[0](c)
            if final is not None:
                c = final(c)
            out[(part, i, h)] = float(c @ u)
    return out, float(logits[token]), token


@pytest.mark.parametrize("position", [-1, 3])
def test_head_logits_match_hf_eager_and_add_up(pair, position):
    text = text_of(pair)
    with gemma3_family():
        trace = trace_model(pair.model, text)
        table = head_logits(pair.model, trace, position=position)
    dec = trace.part("decoder") if pair.family == "bart" else trace
    pos = position % len(dec.tokens)
    want, logit, token = eager_head_logits(pair, text, pos)
    assert table.attrs["target_id"] == token
    assert table.attrs["model_logit"] == pytest.approx(logit, abs=ATOL)
    heads = table[table.kind == "head"]
    assert len(heads) == len(want)
    for row in heads.itertuples():
        assert row.logit == pytest.approx(want[(row.part, row.layer, row.head)], abs=ATOL)
    assert table.logit.sum() == pytest.approx(logit, abs=SUM_ATOL)
    kinds = set(table.kind)
    assert {"embedding", "head", "mlp"} <= kinds
    if pair.family in ("gpt2", "bart"):
        assert {"attention bias", "norm bias"} <= kinds
    assert set(table.position) == {pos} and len(set(table.target)) == 1


def test_logit_lens_matches_hf_eager(pair):
    text = text_of(pair)
    with gemma3_family():
        lens = logit_lens(pair.model, trace_model(pair.model, text), k=3)
    model, fam = pair.eager, pair.family
    with torch.inference_mode():
        out = model(**eager_inputs(pair, text), output_hidden_states=True)
        states = out.decoder_hidden_states if fam == "bart" else out.hidden_states
        norm_path = PATHS[fam][3]
        norm = get(model, norm_path) if norm_path else (lambda x: x)
        head = model.get_output_embeddings()
        bias = getattr(model, "final_logits_bias", torch.zeros(1))
        # the last hidden state is the final norm's output already: the model's own logits
        read = [head(norm(s[0, -1])) + bias.reshape(-1) for s in states[:-1]]
        probs = torch.softmax(torch.stack([*read, out.logits[0, -1]]), -1)  # [layer + 1, vocab]
    assert list(lens.layer) == list(range(-1, len(states) - 1))
    final = int(probs[-1].argmax())
    decode = pair.model.tokenizer.decode
    for i, row in enumerate(lens.itertuples()):
        top = probs[i].topk(3)
        assert row.p_1 == pytest.approx(float(top.values[0]), abs=ATOL)
        assert row.p_3 == pytest.approx(float(top.values[2]), abs=ATOL)
        assert row.top_1 == decode([int(top.indices[0])])
        assert row.final_p == pytest.approx(float(probs[i, final]), abs=ATOL)
    assert lens.final_rank.iloc[-1] == 1 and lens.top_1.iloc[-1] == lens.final_token.iloc[-1]


@pytest.fixture(scope="module")
def char():
    return bundled("char")


def test_silenced_heads_push_nothing_and_the_rest_still_adds_up(char):
    trace = trace_model(char.model, ZH, ablate=[(0, 1), (2, 3)])
    table = head_logits(char.model, trace, token="人")
    heads = table[table.kind == "head"].set_index(["layer", "head"])
    assert heads.loc[(0, 1), "logit"] == 0.0 and heads.loc[(2, 3), "logit"] == 0.0
    assert heads.loc[(0, 1), "promote_1"] == ""  # writes nothing, promotes nothing
    target = table.attrs["target_id"]
    assert char.model.tokenizer.decode([target]) == "人"
    # the silenced model's own logit, as the trace recorded it
    assert table.logit.sum() == pytest.approx(float(trace.next_logits[target]), abs=SUM_ATOL)
    assert table.attrs["model_logit"] == pytest.approx(float(trace.next_logits[target]), abs=ATOL)


def test_a_lean_trace_gives_the_same_rows(char, monkeypatch):
    full = head_logits(char.model, trace_model(char.model, ZH * 3))
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        trace = trace_model(char.model, ZH * 3)
        assert trace.layers[0].in_bands
        lean = head_logits(char.model, trace)
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    assert lean.logit.to_numpy() == pytest.approx(full.logit.to_numpy(), abs=ATOL)


def test_bad_requests_say_why(char):
    trace = trace_model(char.model, ZH)
    with pytest.raises(ValueError, match="outside"):
        head_logits(char.model, trace, position=99)
    with pytest.raises(ValueError, match="tokens for this model"):
        head_logits(char.model, trace, token="狗咬")
    with pytest.raises(ValueError, match="not a token id"):
        head_logits(char.model, trace, token=10**6)
    with pytest.raises(ValueError, match="at least 1"):
        logit_lens(char.model, trace, k=0)
    minilm = load_model(device="cpu")
    with pytest.raises(ValueError, match="language-model head"):
        head_logits(minilm, trace_model(minilm, "the cat"))
    with pytest.raises(ValueError, match="comes from"):
        head_logits(char.model, trace_model(minilm, "the cat"))


def test_an_encoder_decoder_needs_its_whole_trace(tmp_path_factory):
    bart = make_pair("bart", tmp_path_factory).model
    trace = trace_model(bart, "the cat sat")
    assert head_logits(bart, trace).kind.eq("head").sum() == 2 * 2 * 4  # self and cross heads
    with pytest.raises(ValueError, match="not one of its parts"):
        head_logits(bart, trace.part("decoder"))


def test_the_last_tokens_stream_is_read_while_tracing_as_a_rerun_reads_it(char):
    """trace_model records the residual stream at the last real token during its own forward
    (head_logits and the lens of that position then run nothing again); it is what a rerun
    reads, for a padded batch's rows too, and a compacted trace (the server's) keeps it."""
    from attnviz.engine.hooked.stream import read_stream
    from attnviz.engine.trace import compact
    from tests.padded import padded_traces

    traces = [trace_model(char.model, ZH), *padded_traces(char.model, [ZH[:3], ZH])]
    for trace in traces:
        (key,) = [k for k in trace.memo if k[0] == "stream"]
        assert key[2] == len(trace.tokens) - 1 - len(trace.special.get("[PAD]", []))
        assert key in compact(trace).memo
        kept = trace.memo.pop(key)
        again = read_stream(char.model, trace)  # a rerun of the model
        assert set(kept.inputs) == set(again.inputs) and kept.tokens == again.tokens
        for name in kept.inputs:
            torch.testing.assert_close(kept.inputs[name], again.inputs[name], atol=1e-5, rtol=0)
            torch.testing.assert_close(kept.outputs[name], again.outputs[name], atol=1e-5, rtol=0)
        torch.testing.assert_close(kept.logits, again.logits, atol=1e-5, rtol=0)
