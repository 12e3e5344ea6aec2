"""The models attnviz trains and ships: they load offline by name, trace like every family (HF
eager attention is the oracle), predict held-out text better than unigram and bigram baselines,
and the training engine is seeded and deterministic (a short run twice gives the same weights)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

import attnviz
from attnviz import load_model, trace_model
from attnviz.engine.bundled import trained_folder
from attnviz.training import chars, corpus, loop, save, scoring
from attnviz.training.model import TrainConfig

NAME = "attnviz-char-zh-en"
TANG = "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。"
ATOL = 1e-5


@pytest.fixture(scope="module")
def folder():
    path = trained_folder(NAME)
    assert path is not None, "attnviz/models/char-zh-en is missing: run `make models`"
    return path


@pytest.fixture(scope="module")
def model(folder):
    return load_model(NAME, device="cpu")


def test_bundled_models_lists_each_model_with_kind_languages_and_folder(folder):
    listed = {m.name: m for m in attnviz.bundled_models()}
    assert set(listed) >= {NAME, "sentence-transformers/all-MiniLM-L6-v2"}
    ours = listed[NAME]
    assert (ours.kind, ours.languages, ours.path) == ("decoder", ("zh", "en"), folder)
    assert listed["sentence-transformers/all-MiniLM-L6-v2"].kind == "encoder"
    # The record names the weights it describes.
    record = json.loads((folder / "training.json").read_text(encoding="utf-8"))
    assert record["weights_sha256"] == save.sha256(folder / "model.safetensors")
    assert {f["path"].rsplit("/", 1)[1] for f in record["corpus"]} >= {"tang300", "chinese"}
    assert (folder / "model.safetensors").stat().st_size < 8 * 2**20  # a few MB


def test_loads_offline_by_name_with_one_token_per_character(model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = load_model(NAME, device="cpu")  # nothing looked up on the Hub
    assert again.name == NAME and again.kind == "decoder" and again.model_type == "llama"
    assert (model.n_layers, model.n_heads, model.n_kv_heads, model.d_head) == (4, 8, 2, 32)
    assert model.max_length >= 256
    trace = trace_model(model, "我爱水课 狗咬人")
    assert trace.tokens == ["[BOS]", "我", "爱", "水", "课", " ", "狗", "咬", "人"]


def test_traces_equal_hf_eager_attention(model, folder):
    eager = LlamaForCausalLM.from_pretrained(str(folder), attn_implementation="eager")
    eager = eager.float().eval()
    text = TANG + " The moon is bright."
    trace = trace_model(model, text)
    ids = AutoTokenizer.from_pretrained(str(folder))(text, return_tensors="pt")["input_ids"]
    assert trace.tokens == model.tokenizer.convert_ids_to_tokens(ids[0])
    with torch.inference_mode():
        ref = eager(input_ids=ids, output_attentions=True)
    n = ids.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # [q, k]
    for i, layer in enumerate(trace.layers):
        torch.testing.assert_close(layer.weights, ref.attentions[i][0], atol=ATOL, rtol=0)
        assert torch.equal(layer.mask, causal) and torch.all(layer.weights[:, ~causal] == 0)
        torch.testing.assert_close(layer.weights.sum(-1), torch.ones(8, n))
        assert layer.k.shape == (2, n, 32)  # GQA kept unexpanded
    torch.testing.assert_close(trace.next_logits, ref.logits[0, -1], atol=ATOL, rtol=0)


@pytest.fixture(scope="module")
def held_out(model):
    """(n-gram baselines fitted on the training text, held-out windows per language)."""
    if not (corpus.FORTUNE_DIR / "tang300").is_file():
        pytest.skip(
            "the training text is not installed: `make texts` (Debian fortunes-zh, fortunes)"
        )
    text = corpus.read()
    ids = model.tokenizer.get_vocab()
    train = {s: torch.tensor(chars.encode(text.text("train", s), ids)) for s in corpus.STREAMS}
    val = {s: torch.tensor(chars.encode(text.text("val", s), ids)) for s in corpus.STREAMS}
    zh = [scoring.chunks(val["poems"], 256, 3), scoring.chunks(val["chinese"], 256, 3)]
    # Baselines fitted on the same language's training text: the stronger ones.
    ngrams = {
        "zh": scoring.fit([train["poems"], train["chinese"]], len(ids)),
        "en": scoring.fit([train["english"]], len(ids)),
    }
    return ngrams, {"zh": torch.cat(zh), "en": scoring.chunks(val["english"], 256, 6)}


@pytest.mark.parametrize("language", ["zh", "en"])
def test_beats_unigram_and_bigram_on_held_out_text(model, held_out, language):
    ngrams, windows = held_out
    unigram, bigram = scoring.score_ngrams(ngrams[language], windows[language])
    ours = scoring.score_model(model.model, windows[language])
    assert ours.n == unigram.n == bigram.n == windows[language].shape[0] * 255
    assert ours.accuracy > bigram.accuracy > unigram.accuracy, (ours, bigram, unigram)
    assert ours.loss < bigram.loss < unigram.loss, (ours, bigram, unigram)


TINY = TrainConfig(
    vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, context=32,
    steps=12, batch=4, lr=1e-2, warmup=3, eval_every=6, eval_windows=2,
    mix=(("zh", 0.5), ("en", 0.5)),
)  # fmt: skip


def _tiny_run() -> tuple[loop.Run, list[str]]:
    texts = {"zh": TANG * 20, "en": "the cat sat on the mat. " * 40}
    vocab = chars.vocabulary("".join(texts.values()), TINY.vocab_size)
    ids = chars.encoder(vocab)
    data = {s: torch.tensor(chars.encode(t, ids)) for s, t in texts.items()}
    return loop.train(TINY, data, data), vocab


def test_training_a_few_steps_is_deterministic_and_loads_like_any_model(tmp_path):
    torch.set_num_threads(1)
    first, vocab = _tiny_run()
    second, _ = _tiny_run()
    assert first.train_loss == second.train_loss  # same seed: the same run, step for step
    for (name, a), b in zip(first.model.state_dict().items(), second.model.state_dict().values(),
                            strict=True):  # fmt: skip
        assert torch.equal(a, b), name
    assert first.steps_done == TINY.steps and len(first.val_loss) == 2
    assert first.val_loss[-1][1]["zh"] < first.val_loss[0][1]["zh"] < 4.5  # it learns
    save.save(first.model, vocab, tmp_path, dtype=torch.float32)
    loaded = load_model(str(tmp_path), device="cpu")
    trace = trace_model(loaded, "明月光")
    assert trace.tokens == ["[BOS]", "明", "月", "光"] and len(trace.layers) == 2
    ids = torch.tensor([[chars.BOS, *chars.encode("明月光", chars.encoder(vocab))]])
    want = first.model(input_ids=ids).logits[0, -1]
    torch.testing.assert_close(trace.next_logits, want, atol=ATOL, rtol=0)


def test_public_mode_offers_the_trained_models(folder, monkeypatch):
    from attnviz.serve.public import allowed_models, check_model

    monkeypatch.delenv("ATTNVIZ_MODELS", raising=False)
    monkeypatch.setenv("ATTNVIZ_PUBLIC", "1")
    # then the registry LLMs where `attnviz models` installed them (tests/test_gguf_cache.py)
    assert allowed_models()[:2] == ["sentence-transformers/all-MiniLM-L6-v2", NAME]
    assert check_model(NAME) == NAME  # the Model box's choice loads by that name
