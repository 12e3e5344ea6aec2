"""The registry LLMs (SmolLM2-135M, Gemma 3 270M), checked on slices of their real weights: the
first two layers of each converted model (`make llms` converts them at set-up), loaded once per
module and traced against the same weights run with Hugging Face's eager attention (1e-5,
float32): every trace field, the lean trace at 4,096 tokens, Gemma's sliding window and query
scaling, the what-if knobs against the model with its own scaling or W_O changed, generation,
head_roles, the notebook, and tokens shown as text. The whole models are in bench/llms.py."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from attnviz.engine import budget as budget_module
from attnviz.engine.hooked import gguf_cache, load_model, trace_model
from attnviz.engine.hooked.intercept import IMPL
from attnviz.engine.hooked.labels import CONTINUATION, _byte_alphabet, token_labels, token_texts

ATOL = 1e-5
# Logits are tens in size (Gemma: 262k of them from a 640-long dot product each); the trace keeps
# only the last position's (logits_to_keep=1), so its matrix product rounds differently: 6e-5 seen.
LOGITS_ATOL = 1e-4
TEXT = "The animal didn't cross the street because it was too tired. 我爱水课"
# GPT-2's stand-ins for bytes 0x80-0xFF ('æĪ', 'Ã¦'): mojibake where the text has none of them
STAND_INS = {c for c, b in _byte_alphabet().items() if b >= 0x80}


def mojibake(labels, text: str) -> set[str]:
    """Characters of the labels that are byte stand-ins and not in the text itself (é is in
    'café'), and U+FFFD."""
    return (STAND_INS - set(text)) & set("".join(labels)) | {"\ufffd"} & set("".join(labels))


SLICES = {  # name -> layer types of the two-layer slice (None: the model's own)
    "smollm2-135m": None,
    "gemma-3-270m": ["sliding_attention", "full_attention"],  # its layer 1 run as a global one
}


def _installed_folder(name: str):
    try:
        source = gguf_cache.source(name)
    except ValueError as err:
        pytest.skip(f"{err} (`make test` runs `make llms` first)")
    return gguf_cache.converted(source)


def _load_slice(name: str):
    """(name, LoadedModel of a 2-layer slice, its HF model): the converted weights of layers 0
    and 1, the embedding, the final norm, the real tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = _installed_folder(name)
    config = AutoConfig.from_pretrained(folder)
    config.num_hidden_layers = 2
    if SLICES[name] is not None:
        config.layer_types = SLICES[name]
    hf = AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32)
    model = load_model(hf, tokenizer=AutoTokenizer.from_pretrained(folder), device="cpu")
    return name, model, hf


@pytest.fixture(scope="module")
def slices():
    """Each slice loaded once for the module (its tokenizer serves the label tests too)."""
    loaded: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in loaded:
            loaded[name] = _load_slice(name)
        return loaded[name]

    yield get
    loaded.clear()


@pytest.fixture(scope="module", params=sorted(SLICES))
def llm(request, slices):
    return slices(request.param)


@contextmanager
def eager(hf):
    """The same model object run with Hugging Face's eager attention for the block."""
    hf.set_attn_implementation("eager")
    try:
        yield hf
    finally:
        hf.set_attn_implementation(IMPL)


def eager_run(hf, model, text: str, max_length: int | None = None):
    enc = model.call_tokenizer(
        text, return_tensors="pt", truncation=max_length is not None, max_length=max_length
    )
    with eager(hf), torch.inference_mode():  # the last logits only: Gemma has 262k a position
        out = hf(
            enc["input_ids"], output_attentions=True, output_hidden_states=True, logits_to_keep=1
        )
    return out, enc["input_ids"][0]


def test_every_trace_field_equals_hf_eager(llm):
    name, model, hf = llm
    trace = trace_model(model, TEXT)
    ref, ids = eager_run(hf, model, TEXT)
    n, config = len(ids), hf.config
    n_heads, n_kv = config.num_attention_heads, config.num_key_value_heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // n_heads
    scale = getattr(config, "query_pre_attn_scalar", d_head) ** -0.5  # Gemma: its own scalar
    seen = {}
    hooks = [b.w_o.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o.clone()))
             for i, b in enumerate(model.blocks)]  # fmt: skip
    try:
        with eager(hf), torch.inference_mode():
            hf(ids[None])
    finally:
        for hook in hooks:
            hook.remove()
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for i, layer in enumerate(trace.layers):
        assert layer.scale == pytest.approx(scale, rel=1e-7)
        assert layer.q.shape == (n_heads, n, d_head) and layer.k.shape == (n_kv, n, d_head)
        assert torch.equal(layer.mask, causal)  # 25 tokens: inside Gemma's 512 window
        torch.testing.assert_close(layer.weights, ref.attentions[i][0], atol=ATOL, rtol=0)
        k = layer.k.repeat_interleave(n_heads // n_kv, dim=0)  # [head, n, d_head]
        v = layer.v.repeat_interleave(n_heads // n_kv, dim=0)  # [head, n, d_head]
        torch.testing.assert_close(layer.scores, layer.q @ k.transpose(-1, -2))
        torch.testing.assert_close(layer.z, layer.weights @ v, atol=ATOL, rtol=0)
        torch.testing.assert_close(layer.output, seen[i][0], atol=ATOL, rtol=0)
    torch.testing.assert_close(trace.hidden, ref.hidden_states[-1][0], atol=ATOL, rtol=0)
    torch.testing.assert_close(trace.next_logits, ref.logits[0, 0], atol=LOGITS_ATOL, rtol=0)
    assert not mojibake(trace.tokens, TEXT)


def _scaled(hf, factor: float):
    """Every attention module's own scaling multiplied by `factor` (the oracle of the knobs)."""
    for layer in hf.model.layers:
        layer.self_attn.scaling *= factor


def test_knobs_equal_the_model_with_its_scaling_or_w_o_changed(llm):
    name, model, hf = llm
    base = model.blocks[0].attention.scaling
    d_head = model.d_head
    for knobs, factor in ((dict(use_scale=False), 1 / base), (dict(temperature=2.0), 0.5)):
        trace = trace_model(model, TEXT, **knobs)
        _scaled(hf, factor)
        try:
            ref, _ = eager_run(hf, model, TEXT)
        finally:
            _scaled(hf, 1 / factor)
        assert trace.layers[0].scale == pytest.approx(base * factor, rel=1e-6)
        torch.testing.assert_close(trace.next_logits, ref.logits[0, 0], atol=LOGITS_ATOL, rtol=0)
    # silencing head 1 of layer 1 == zeroing its columns of W_O
    trace = trace_model(model, TEXT, ablate=[(1, 1)])
    w_o = hf.model.layers[1].self_attn.o_proj.weight
    kept = w_o[:, d_head : 2 * d_head].clone()
    with torch.no_grad():
        w_o[:, d_head : 2 * d_head] = 0
    try:
        ref, _ = eager_run(hf, model, TEXT)
    finally:
        with torch.no_grad():
            w_o[:, d_head : 2 * d_head] = kept
    torch.testing.assert_close(trace.next_logits, ref.logits[0, 0], atol=LOGITS_ATOL, rtol=0)
    assert torch.all(trace.layers[1].z[1] == 0)


@pytest.fixture
def lean(monkeypatch):
    """Traces are lean, and a 4,096-token trace of a two-layer slice is within the budget."""
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    monkeypatch.setenv("ATTNVIZ_MAX_TRACE_BYTES", str(2**31))
    budget_module.budget.cache_clear()
    yield
    monkeypatch.undo()
    budget_module.budget.cache_clear()


def _long_text(model, n: int) -> str:
    """A text of more than n tokens: a passage with its words shuffled."""
    words = TEXT.split() * (n // 4)
    g = torch.Generator().manual_seed(0)
    return " ".join(words[i] for i in torch.randperm(len(words), generator=g).tolist())


# SmolLM2 at 4,096 tokens; Gemma (4 heads of d_head 256: 3.5x the work a layer) at 1,536, three
# windows of 512 (bench/llms.py traces both whole models at 4,096)
LEAN_TOKENS = {"smollm2-135m": 4096, "gemma-3-270m": 1536}


def test_lean_trace_of_a_long_input_equals_hf_eager(llm, lean):
    name, model, hf = llm
    n = LEAN_TOKENS[name]
    text = _long_text(model, n)
    trace = trace_model(model, text, max_length=n)
    assert trace.meta["lean"] and len(trace.tokens) == n
    ref, _ = eager_run(hf, model, text, max_length=n)
    window = {0: 512} if name.startswith("gemma") else {}
    middle = (slice(n // 2, n // 2 + 256), slice(n // 3, n // 2 + 256))
    blocks = [(slice(0, 48), slice(None)), middle, (slice(n - 32, n), slice(None))]
    for i, layer in enumerate(trace.layers):
        rule = layer.rule
        assert rule.causal and rule.window == window.get(i)
        for rows, cols in blocks:
            for h in (0, layer.n_heads - 1):
                got = layer.block("weights", h, rows, cols)
                want = ref.attentions[i][0, h][rows][:, cols]
                torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
        if i in window:  # the window in the weights: nothing further back than 511 keys
            last = layer.block("weights", 0, slice(n - 1, n))[0]  # [k]
            assert torch.all(last[: n - 512] == 0) and last[n - 512 :].sum() > 0.999
    torch.testing.assert_close(trace.next_logits, ref.logits[0, 0], atol=LOGITS_ATOL, rtol=0)
    del ref


def test_gemma_sliding_window_is_in_the_mask_of_a_full_trace(llm):
    name, model, hf = llm
    if not name.startswith("gemma"):
        pytest.skip("SmolLM2 has no sliding window")
    text = _long_text(model, 600)
    trace = trace_model(model, text, max_length=600)
    assert not trace.meta["lean"]
    q = torch.arange(600).unsqueeze(1)  # [q, 1]
    k = torch.arange(600).unsqueeze(0)  # [1, k]
    assert torch.equal(trace.layers[0].mask, (k <= q) & (q - k < 512))  # sliding: 512 keys
    assert torch.equal(trace.layers[1].mask, k <= q)  # global
    ref, _ = eager_run(hf, model, text, max_length=600)
    for i, layer in enumerate(trace.layers):
        torch.testing.assert_close(layer.weights, ref.attentions[i][0], atol=ATOL, rtol=0)


def test_generation_rows_equal_hf_eager_and_text_has_no_mojibake(llm):
    from attnviz.engine.generate import generate

    name, model, hf = llm
    run = generate(model, "我爱水课，因为", n_new=4)
    assert "".join(run.texts) == model.tokenizer.decode(run.ids)
    assert not mojibake(run.tokens, "".join(run.texts)) and "\ufffd" not in "".join(run.texts)
    for step in run.steps:  # each step's row: the last row of eager on the ids so far
        ids = torch.tensor([run.ids[: step.position + 1]])
        with eager(hf), torch.inference_mode():
            ref = hf(ids, output_attentions=True, logits_to_keep=1)
        for i in range(model.n_layers):
            torch.testing.assert_close(step.weights[i], ref.attentions[i][0, :, -1], atol=ATOL,
                                       rtol=0)  # fmt: skip
        assert step.next_id == run.ids[step.position + 1]


def test_head_roles_scores_are_the_traces_scores(llm):
    from attnviz.measures.roles import head_roles

    name, model, hf = llm
    texts = ["one two three four five one two three four five", TEXT]
    atlas = head_roles(model, texts)
    assert len(atlas) == 2 * model.n_heads
    want = torch.zeros(2, model.n_heads)
    rows = 0
    for text in texts:
        trace = trace_model(model, text)
        n = len(trace.tokens)
        for i, layer in enumerate(trace.layers):
            want[i] += layer.weights[:, torch.arange(1, n), torch.arange(n - 1)].sum(-1)
        rows += n - 1
    got = torch.tensor(atlas.sort_values(["layer", "head"])["previous_token"].to_numpy())
    torch.testing.assert_close(got.float(), (want / rows).flatten(), atol=1e-4, rtol=0)


def test_logit_lens_reruns_a_trace_whose_labels_are_not_the_vocabularys_pieces(llm):
    """The trace's tokens are labels (SmolLM2's byte pieces read as characters), so the rerun
    takes the ids tracing kept; the lens's last row is the trace's own prediction and no token
    it names is U+FFFD."""
    from attnviz.measures.lens import head_logits, logit_lens

    name, model, hf = llm
    trace = trace_model(model, TEXT)
    lens = logit_lens(model, trace, k=3)
    probs = torch.softmax(trace.next_logits, dim=-1)
    assert lens["final_p"].iloc[-1] == pytest.approx(float(probs.max()), abs=1e-4)
    assert lens["final_rank"].iloc[-1] == 1
    heads = head_logits(model, trace, k=2)
    words = [str(w) for w in lens.filter(like="top_").to_numpy().ravel()]
    words += [str(w) for w in heads.filter(regex="promote|suppress").to_numpy().ravel()]
    assert words and "\ufffd" not in "".join(words)


def test_notebook_shows_a_head_with_readable_token_labels(llm):
    import attnviz

    name, model, hf = llm
    trace = trace_model(model, "我爱水课 😀")
    figures = attnviz.show(trace, view="detail", layer=1, head=0)
    keys = [str(x) for fig in figures for x in fig.data[0].x]  # "position: token" per key
    assert any(k.endswith(": 我") for k in keys) and not mojibake(keys, "我爱水课 😀")


def test_smollm2_tokenizer_labels_chinese_and_emoji_as_characters(slices):
    tokenizer = slices("smollm2-135m")[1].tokenizer
    text = "我爱水课。狗咬人 😀👍🏽 naïve café, the end"
    ids = tokenizer(text)["input_ids"]
    raw = tokenizer.convert_ids_to_tokens(ids)
    labels = token_labels(tokenizer, ids)
    assert mojibake(raw, text)  # the byte pieces as the tokenizer writes them
    assert not mojibake(labels, text)
    # 我 is two pieces ('æĪ', 'ĳ'): the character on the first, a continuation mark on the rest
    assert labels[:2] == ["我", CONTINUATION + "我"] and raw[:2] == ["æĪ", "ĳ"]
    firsts = [label for label in labels if not label.startswith(CONTINUATION)]
    assert "".join(firsts).replace("Ġ", " ").startswith("我爱水课。狗咬人 😀👍🏽 naïve café")
    assert labels[-2:] == raw[-2:] == ["Ġthe", "Ġend"]  # English keeps the tokenizer's form
    assert "".join(token_texts(tokenizer, ids)) == tokenizer.decode(ids) == text
    from attnviz.engine.hooked.labels import piece_text

    assert all("\ufffd" not in piece_text(tokenizer, i) for i in ids)


def test_gemma_tokenizer_labels_byte_fallback_pieces_as_characters(slices):
    tokenizer = slices("gemma-3-270m")[1].tokenizer
    text = "我爱水课 龘"  # 龘 is not in the vocabulary: three byte tokens
    ids = tokenizer(text)["input_ids"]
    raw = tokenizer.convert_ids_to_tokens(ids)
    labels = token_labels(tokenizer, ids)
    assert raw[1:5] == labels[1:5] == ["我", "爱", "水", "课"]  # whole characters as they are
    assert raw[-3:] == ["<0xE9>", "<0xBE>", "<0x98>"]
    assert labels[-3:] == ["龘", CONTINUATION + "龘", CONTINUATION + "龘"]
    assert "".join(token_texts(tokenizer, ids)) == tokenizer.decode(ids)


def test_a_changed_w_o_changes_the_kept_outputs_and_key_norms(slices):
    """The block outputs the trace keeps are the model's own (caught from W_O), and the W_O Gram
    matrices kept between traces are made again when W_O changes in place."""

    _, model, hf = slices("smollm2-135m")
    w_o = hf.model.layers[1].self_attn.o_proj.weight
    before = trace_model(model, TEXT)
    kept = w_o.detach().clone()
    with torch.no_grad():
        w_o.mul_(2.0)
    try:
        after = trace_model(model, TEXT)
    finally:
        with torch.no_grad():
            w_o.copy_(kept)
    torch.testing.assert_close(after.layers[1].output, 2 * before.layers[1].output)
    torch.testing.assert_close(after.layers[1].norms(), 2 * before.layers[1].norms())
    torch.testing.assert_close(after.layers[0].norms(), before.layers[0].norms())
    again = trace_model(model, TEXT)  # W_O restored: the first Gram matrices again
    torch.testing.assert_close(again.layers[1].norms(), before.layers[1].norms())


def test_the_cached_tokenizer_reads_as_transformers_reads_it_and_copies_cheaply(slices):
    """tokenizing.read skips transformers' Python pass over tokenizer.json and gets the same
    tokenizer; call_copy's Rust tokenizer shares the vocabulary but not the settings."""
    from transformers import AutoTokenizer

    from attnviz.engine.hooked import tokenizing

    folder = _installed_folder("smollm2-135m")
    plain = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    read = tokenizing.read(str(folder), True)
    for text in (*gguf_cache.TOKENIZER_PROBES, TEXT):
        assert read(text)["input_ids"] == plain(text)["input_ids"]
    python_side = [{k: v for k, v in vars(t).items() if k != "_tokenizer"} for t in (read, plain)]
    assert python_side[0] == python_side[1]
    assert read._tokenizer.to_str() == plain._tokenizer.to_str()
    copy = tokenizing.call_copy(read)
    assert copy._tokenizer is not read._tokenizer
    assert copy._tokenizer.to_str() == read._tokenizer.to_str()
    ids = copy(TEXT, truncation=True, max_length=5)["input_ids"]
    assert ids == plain(TEXT)["input_ids"][:5]
    assert copy._tokenizer.truncation is not None and read._tokenizer.truncation is None
    copy.pad_token = "<|endoftext|>"
    assert copy.pad_token != read.pad_token == plain.pad_token == "<|im_end|>"
