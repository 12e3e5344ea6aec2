"""Why a head looks where it looks: an attention logit split into query-side x key-side parts
(measures/qk.py). The parts add up to the logit on every family attnviz traces, full and lean;
and single parts are recomputed here independently, from the raw modules of the same weights run
with Hugging Face's eager attention (hooks read what the norms saw), RoPE applied by
transformers' own function."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, BertConfig
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from attnviz.engine import budget as budget_module
from attnviz.engine.hooked import load_model, resolve, trace_model
from attnviz.measures import roles
from attnviz.measures.qk import qk_attribution
from attnviz.measures.qk_sources import SOURCES, qk_keys, source_sums
from tests.test_families import CONFIGS as FAMILY_CONFIGS
from tests.writes_models import CONFIGS as WRITES_CONFIGS
from tests.writes_models import _randomise, bundled, make_pair

TEXT = "the cat sat on the mat and then the cat slept"
CONFIGS = {**FAMILY_CONFIGS, **WRITES_CONFIGS}
DECODERS = ("llama", "gpt2", "qwen2", "gemma3_text", "qwen3", "olmo2", "phi3", "granite")


def close(got: float, want: float, row_max: float) -> bool:
    """Within 1e-4 of the row's largest |logit| (at least 1)."""
    return abs(got - want) <= 1e-4 * max(1.0, row_max)


def row_max(trace, layer: int, head: int, query: int) -> float:
    logits = trace.layers[layer].block("logits", head, [query])[0]
    return float(logits[torch.isfinite(logits)].abs().max())


def build(family: str, folder) -> object:
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve(None)[0])
    if family == "bert":
        model = AutoModel.from_config(tiny_bert())
    elif family == "bart":
        from transformers import AutoModelForSeq2SeqLM

        model = AutoModelForSeq2SeqLM.from_config(CONFIGS[family]())
    else:
        model = AutoModelForCausalLM.from_config(CONFIGS[family]())
    _randomise(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def tiny_bert() -> BertConfig:
    return BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64)  # fmt: skip


def check_cells(model, trace, part=None, cells=((1, 3, 6), (1, 0, -1), (0, 2, 4))) -> None:
    sub = trace.part(part) if part else trace
    for layer, head, query in cells:
        layer = min(layer, len(sub.layers) - 1)
        table = qk_attribution(model, trace, layer, head, query, part=part)
        q = table.attrs["query"]
        assert close(table.score.sum(), table.attrs["logit"], row_max(sub, layer, head, q)), (
            layer, head, query, table.score.sum(), table.attrs["logit"])  # fmt: skip
        weights = sub.layers[layer].block("weights", head, [q])[0]
        assert table.attrs["key"] == int(weights.argmax())


@pytest.mark.parametrize("family", [*DECODERS, "bert"])
def test_the_parts_add_up_to_the_logit_on_every_family(family, tmp_path):
    model = build(family, tmp_path)
    trace = trace_model(model, TEXT)
    check_cells(model, trace)
    kinds = set(qk_attribution(model, trace, 1, 1, 5).q_kind)
    want = {"embedding", "head", "mlp"}
    if family in ("gpt2", "bert"):
        want |= {"position embedding", "norm bias", "projection bias", "attention bias"}
    if family == "bert":
        want |= {"token type embedding"}
    assert want <= kinds, kinds


def test_an_encoder_decoders_three_parts_add_up(tmp_path):
    model = build("bart", tmp_path)
    trace = trace_model(model, TEXT)
    for part in ("encoder", "decoder", "cross"):
        check_cells(model, trace, part)


@pytest.fixture(scope="module")
def char():
    return load_model("attnviz-char-zh-en")


def test_a_lean_trace_gives_the_same_split(char, monkeypatch):
    text = "the cat sat on the mat. " * 3
    full = qk_attribution(char, trace_model(char, text), 2, 1, 40)
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        trace = trace_model(char, text)
        assert trace.layers[0].in_bands
        lean = qk_attribution(char, trace, 2, 1, 40)
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    assert lean.attrs["key"] == full.attrs["key"]
    assert lean.score.to_numpy() == pytest.approx(full.score.to_numpy(), abs=1e-4)


def test_a_silenced_head_carries_nothing_and_the_rest_still_adds_up(char):
    trace = trace_model(char, TEXT, ablate=[(0, 1)])
    table = qk_attribution(char, trace, 1, 2, 8)
    silenced = table[(table.q_kind == "head") & (table.q_layer == 0) & (table.q_head == 1)]
    assert len(silenced) and (silenced.score == 0).all()
    assert close(table.score.sum(), table.attrs["logit"], row_max(trace, 1, 2, 8))


def test_a_masked_cell_and_bad_requests_are_refused_with_a_message(char):
    trace = trace_model(char, TEXT)
    with pytest.raises(ValueError, match="may not attend"):
        qk_attribution(char, trace, 1, 0, 3, key=7)  # a later key of a causal decoder
    with pytest.raises(ValueError, match="not a layer"):
        qk_attribution(char, trace, 99, 0, 3)
    with pytest.raises(ValueError, match="not a head"):
        qk_attribution(char, trace, 0, 99, 3)
    with pytest.raises(ValueError, match="outside"):
        qk_attribution(char, trace, 0, 0, 999)
    with pytest.raises(TypeError, match="token position"):
        qk_attribution(char, trace, 0, 0, "3")
    with pytest.raises(ValueError, match="side"):
        qk_keys(char, trace, 0, 0, 3, side="both")


def test_a_sliding_window_masks_the_far_keys(tmp_path):
    model = build("gemma3_text", tmp_path)  # layer 0 slides over 3 tokens
    trace = trace_model(model, TEXT)
    with pytest.raises(ValueError, match="may not attend"):
        qk_attribution(model, trace, 0, 0, 9, key=2)
    table = qk_attribution(model, trace, 0, 0, 9, key=8)
    assert close(table.score.sum(), table.attrs["logit"], row_max(trace, 0, 0, 9))


@pytest.mark.parametrize("side", ["key", "query"])
def test_the_per_key_form_sums_to_each_keys_logit(char, side):
    trace = trace_model(char, TEXT)
    table = qk_keys(char, trace, 2, 1, 12, side=side)
    per_key = table.groupby("key", sort=False).score.sum()
    assert list(per_key.index) == list(range(13))  # causal: keys 0..12
    want = trace.layers[2].block("logits", 1, [12])[0, :13]
    assert per_key.to_numpy() == pytest.approx(want.double().numpy(), abs=1e-4 * 50)
    assert table.attrs["logits"] == pytest.approx(per_key.tolist(), abs=1e-9)
    one = qk_attribution(char, trace, 2, 1, 12, key=4)
    col = "k_kind" if side == "key" else "q_kind"
    by_kind = one.groupby(col).score.sum()
    mine = table[table.key == 4].groupby("kind").score.sum()
    assert mine.sort_index().to_numpy() == pytest.approx(by_kind.sort_index().to_numpy(), rel=1e-5)


def test_the_sources_add_up_to_the_top_logits(char):
    trace = trace_model(char, TEXT)
    sums = source_sums(char, trace)
    for layer in (0, 2):
        traced = trace.layers[layer]
        for head in (0, 3):
            w = traced.block("weights", head)
            logits = traced.block("logits", head)
            top = logits.gather(1, w.argmax(1, keepdim=True)).sum()
            assert sums[("decoder", layer)][head].sum() == pytest.approx(float(top), rel=1e-4)
    assert sums[("decoder", 0)].shape == (trace.layers[0].n_heads, len(SOURCES))
    atlas = roles.head_roles(char, [TEXT])
    shares = atlas[list(roles.QK_COLUMNS)].to_numpy()
    assert shares == pytest.approx(shares, nan_ok=False)
    assert abs(shares).sum(1) == pytest.approx(1.0)
    # layer 0 reads the embeddings alone: no earlier head or MLP can carry its logits
    first = atlas[atlas.layer == 0]
    assert (first.qk_heads == 0).all() and (first.qk_mlp == 0).all()


# --- single parts recomputed from the raw modules ------------------------------------------


def _hooks(model, names: dict) -> tuple[dict, list]:
    got, handles = {}, []
    for name, module in names.items():

        def read(m, args, kwargs, out, name=name):
            got[name] = (args[0] if args else kwargs["hidden_states"])[0].detach().double()
            got[name + ":out"] = (out[0] if isinstance(out, tuple) else out)[0].detach().double()
            if "position_embeddings" in kwargs:
                got[name + ":rope"] = kwargs["position_embeddings"]

        handles.append(module.register_forward_hook(read, with_kwargs=True))
    return got, handles


def rms_frozen(x: torch.Tensor, at: torch.Tensor, norm, gemma: bool) -> torch.Tensor:
    """x through an RMSNorm frozen at its input `at` (no bias)."""
    w = norm.weight.detach().double()
    w = 1 + w if gemma else w
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    return x / (at.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w


def ln_frozen(x: torch.Tensor, at: torch.Tensor, norm) -> torch.Tensor:
    """x through a LayerNorm frozen at `at`: centred, over at's std, times the weight (no bias)."""
    std = (at.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    return (x - x.mean(-1, keepdim=True)) / std * norm.weight.detach().double()


def part_score(table, q: tuple, k: tuple) -> float:
    def pick(prefix, spec):
        kind, layer, head = spec
        m = table[f"{prefix}_kind"] == kind
        m &= table[f"{prefix}_layer"].isna() if layer is None else table[f"{prefix}_layer"] == layer
        m &= table[f"{prefix}_head"].isna() if head is None else table[f"{prefix}_head"] == head
        return m

    rows = table[pick("q", q) & pick("k", k)]
    assert len(rows) == 1
    return float(rows.score.iloc[0])


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_single_parts_match_the_raw_modules_on_a_rope_decoder(family, tmp_path_factory):
    pair = make_pair(family, tmp_path_factory)
    gemma = family == "gemma3_text"
    eager, i, h, src = pair.eager, 7, 3, 1  # query 7, head 3 (kv head 1 of 2), source head 1
    trace = trace_model(pair.model, TEXT)
    j = trace.layers[1].block("mask", h, [i])[0].nonzero().reshape(-1)[0].item()  # first key
    j = max(j, i - 2)
    table = qk_attribution(pair.model, trace, 1, h, i, key=j)
    layers = eager.model.layers
    got, handles = _hooks(eager, {
        "emb": eager.model.embed_tokens, "in1": layers[1].input_layernorm,
        "o0": layers[0].self_attn.o_proj, "att1": layers[1].self_attn,
    })  # fmt: skip
    try:
        with torch.no_grad():
            eager(input_ids=torch.tensor([trace.token_ids]))
    finally:
        for handle in handles:
            handle.remove()
    att = layers[1].self_attn
    d = att.head_dim
    g = h // (att.config.num_attention_heads // att.config.num_key_value_heads)
    x1 = got["in1"]  # what layer 1's norm read [n, d_model]

    def through(vec: torch.Tensor, p: int, proj, norm, group: int) -> torch.Tensor:
        v = rms_frozen(vec, x1[p], layers[1].input_layernorm, gemma)
        rows = slice(group * d, (group + 1) * d)
        out = v @ proj.weight.detach().double()[rows].T
        if gemma:  # the q/k norm frozen at the position's own q or k of this head
            whole = rms_frozen(x1[p], x1[p], layers[1].input_layernorm, gemma)
            raw = whole @ proj.weight.detach().double()[rows].T
            out = rms_frozen(out, raw, norm, True)
        cos, sin = (t[0, p : p + 1].double() for t in got["att1:rope"])
        rotated, _ = apply_rotary_pos_emb(out[None, None, None], out[None, None, None], cos, sin)
        return rotated.reshape(-1)

    def write(p: int) -> torch.Tensor:  # head `src` of layer 0 at p, as it reaches the stream
        z = got["o0"][p, src * d : (src + 1) * d]
        w = z @ layers[0].self_attn.o_proj.weight.detach().double()[:, src * d : (src + 1) * d].T
        if gemma:
            w = rms_frozen(w, got["o0:out"][p], layers[0].post_attention_layernorm, True)
        return w

    q_norm, k_norm = getattr(att, "q_norm", None), getattr(att, "k_norm", None)
    emb_q = through(got["emb:out"][i], i, att.q_proj, q_norm, h)
    emb_k = through(got["emb:out"][j], j, att.k_proj, k_norm, g)
    head_q = through(write(i), i, att.q_proj, q_norm, h)
    scale = att.scaling
    assert part_score(table, ("embedding", None, None), ("embedding", None, None)) == (
        pytest.approx(float(emb_q @ emb_k) * scale, abs=1e-4))  # fmt: skip
    assert part_score(table, ("head", 0, src), ("embedding", None, None)) == pytest.approx(
        float(head_q @ emb_k) * scale, abs=1e-4
    )


@pytest.mark.parametrize("which", ["minilm", "tiny"])
def test_single_parts_match_the_raw_modules_on_a_post_ln_bert(which, tmp_path):
    if which == "minilm":
        pair = bundled("minilm")
        model, eager = pair.model, pair.eager
    else:
        model = build("bert", tmp_path)
        eager = AutoModel.from_pretrained(str(tmp_path), attn_implementation="eager")
        eager.eval()
    trace = trace_model(model, TEXT)
    i, j, h, src = 4, 2, 1, 0
    table = qk_attribution(model, trace, 1, h, i, key=j)
    emb, l0, l1 = eager.embeddings, eager.encoder.layer[0], eager.encoder.layer[1]
    got, handles = _hooks(eager, {
        "embnorm": emb.LayerNorm, "n0": l0.attention.output.LayerNorm,
        "n1": l0.output.LayerNorm, "dense": l0.attention.output.dense,
    })  # fmt: skip
    try:
        with torch.no_grad():
            eager(**model.call_tokenizer(TEXT, return_tensors="pt"))
    finally:
        for handle in handles:
            handle.remove()
    self1 = l1.attention.self
    d = self1.attention_head_size
    ids = trace.token_ids

    def stream(vec: torch.Tensor, p: int, from_embeddings: bool) -> torch.Tensor:
        if from_embeddings:
            vec = ln_frozen(vec, got["embnorm"][p], emb.LayerNorm)
        vec = ln_frozen(vec, got["n0"][p], l0.attention.output.LayerNorm)
        return ln_frozen(vec, got["n1"][p], l0.output.LayerNorm)

    def side(vec: torch.Tensor, proj) -> torch.Tensor:
        return vec @ proj.weight.detach().double()[h * d : (h + 1) * d].T

    word = emb.word_embeddings.weight.detach().double()
    wq = side(stream(word[ids[i]], i, True), self1.query)
    wk = side(stream(word[ids[j]], j, True), self1.key)
    z = got["dense"][i, src * d : (src + 1) * d]
    write = z @ l0.attention.output.dense.weight.detach().double()[:, src * d : (src + 1) * d].T
    hq = side(stream(write, i, False), self1.query)
    scale = d**-0.5
    assert part_score(table, ("embedding", None, None), ("embedding", None, None)) == (
        pytest.approx(float(wq @ wk) * scale, abs=1e-4))  # fmt: skip
    assert part_score(table, ("head", 0, src), ("embedding", None, None)) == pytest.approx(
        float(hq @ wk) * scale, abs=1e-4
    )
    assert close(table.score.sum(), table.attrs["logit"], row_max(trace, 1, h, i))
