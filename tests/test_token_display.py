"""One spelling per token: the rule (attnviz.engine.hooked.labels.shown) and every place that
prints a token (Head detail and overview ticks, Lines, Compare, the Atlas bars, the next-token
bars, the head-logits grid and table, the logit lens, CSV headers, `attnviz.show`'s HTML) give
the same token the same string: ␣ a space, ⏎ a line break, never the tokenizer's Ġ ▁ Ċ, a quoted
repr or a bare space. Checked on a tiny random Llama with a byte-level BPE tokenizer (Ġ) built
here, and on SmolLM2 (Ġ) and Gemma 3 (▁) where their files are installed."""

from __future__ import annotations

import html
import json

import pytest
import torch

import attnviz
from attnviz.engine.hooked import load_model, trace_model
from attnviz.engine.hooked.labels import piece_text, shown, token_labels
from attnviz.measures.next_token import next_tokens
from attnviz.views import charts, frames, writes
from attnviz.views.atlas import example_bars
from attnviz.views.selection import Selection
from attnviz.views.tokens import legend

TEXT = "The cat didn't sleep.\n\nThe cat was tired"
MARKS = ("Ġ", "▁", "Ċ", "ĉ")  # a tokenizer's own marks: never on a screen


def test_one_rule_for_a_label_and_a_text() -> None:
    for same in (("Ġtired", "▁tired", " tired", "␣tired"), ("ĊĊ", "\n\n", "⏎⏎"), ("ĉ", "\t")):
        assert len({shown(t) for t in same}) == 1, same
    assert shown("Ġtired") == "␣tired" and shown("\n\n") == "⏎⏎" and shown("<0x0A>") == "⏎"
    assert shown("◌爱") == "◌爱" and shown("<0xE4><0xBD>") == "<0xE4><0xBD>"
    assert shown("[CLS]") == "[CLS]" and shown("##ing") == "##ing" and shown("床") == "床"
    for t in ("Ġdidn", "\n", "▁我", "<0xE4>"):
        assert shown(shown(t)) == shown(t)


def test_the_legend_names_only_the_marks_shown_in_both_languages() -> None:
    en, zh = Selection(lang="en").tr, Selection(lang="zh").tr
    assert legend(["The", "Ġcat"], en) == "␣ = a space"
    assert legend(["cat"], en) == ""
    line = legend(["Ċ", "我", "◌我", "<0xE4><0xBD>"], en)
    assert (
        line
        == "⏎ = a line break · ◌ = part of a character · <0xE4> = one byte, part of a character"
    )
    assert legend(["▁tired", "\t"], zh) == "␣ = 空格 · ⇥ = 制表符"


def strings(fig) -> list[str]:
    """Every string a figure sends to the browser (ticks, hover, cell text, titles)."""
    out: list[str] = []

    def walk(x) -> None:
        if isinstance(x, str):
            out.append(html.unescape(x))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(fig.to_json()))
    return out


def no_marks(texts: list[str], where: str) -> None:
    bad = [s for s in texts if any(m in s for m in MARKS)]
    assert not bad, f"{where}: tokenizer marks on screen: {bad[:5]}"


def check_views(model, text: str) -> None:
    """Every view of `text` spells each input token as shown(label) and never with a mark."""
    trace = trace_model(model, text)
    spaced = [t for t in trace.tokens if shown(t).startswith("␣") and len(t) > 1]
    assert spaced, trace.tokens
    word = shown(spaced[-1])  # e.g. ␣tired
    assert shown(token_labels(model.tokenizer, [trace.token_ids[-1]])[0]) == shown(
        piece_text(model.tokenizer, trace.token_ids[-1])
    )
    other = trace_model(model, text.replace("cat", "dog"))
    views = {
        "detail": attnviz.show(trace, view="detail", layer=1, head=0),
        "overview": attnviz.show(trace, view="overview", layer=1, head=0),
        "lines": attnviz.show(trace, view="lines", layer=1),
        "compare": attnviz.show(trace, view="compare", other=other, layer=1, head=0),
    }
    for name, view in views.items():
        texts = [s for fig in view for s in strings(fig)]
        no_marks(texts, name)
        notebook = view._repr_html_()
        no_marks([notebook], f"{name} notebook HTML")
        if name != "overview":  # the overview's mosaic has no tokens (its head: detail's maps)
            assert any(word in s for s in texts), f"{name} never draws {word}"
            assert word in html.unescape(notebook), f"{name} notebook HTML"
    weights = trace.layers[1].head("weights", 0)[-1].tolist()
    bars = strings(example_bars(weights, trace.key_tokens, len(weights) - 1, 0, "t"))
    no_marks(bars, "atlas bars")
    assert any(s.endswith(word) for s in bars)
    w, rows, cols = frames.head_weights(trace, 1, 0, (0, len(trace.tokens)))
    header = frames.matrix_frame(w, rows, cols).to_csv().splitlines()[0]
    no_marks([header], "CSV header")
    assert f":{word}" in header
    check_tables(model, trace)


def check_tables(model, trace) -> None:
    """The next-token bars, the head-logits grid, table and CSV, and the logit lens draw each
    token they list as shown(its text): ' tired' and '\\n\\n' never appear raw or quoted."""
    rows = next_tokens(model, trace, k=10)
    bar_labels = list(charts.next_tokens(rows).data[0].y)
    tick = [html.unescape(s) for s in charts.next_tokens(rows).layout.yaxis.ticktext]
    assert tick == [shown(r.token) for r in rows], (bar_labels, tick)
    sel = Selection()
    logits = writes.head_logits_table(model, trace, sel)
    texts = [s for fig in writes.logits_from_table(logits, sel) for s in strings(fig)]
    no_marks(texts, "head logits")
    for tok in logits[logits["kind"] == "head"]["promote_1"].dropna():
        assert any(shown(tok) in s for s in texts), (tok, texts[:5])
    target = shown(logits["target"].iloc[0])
    assert any(target in s for s in texts if "push" in s), "the grid's title"
    drawn = writes.shown_table(logits)
    assert list(drawn["promote_1"]) == [shown(t) for t in logits["promote_1"]]
    no_marks([drawn.to_csv(index=False)], "head logits CSV")
    lens = writes.lens_table(model, trace)
    grid, line = writes.lens_from_table(lens, sel)
    cells = [html.unescape(s) for row in grid.data[0].text for s in row]
    expected = [f"{shown(t)}<br>" for t in lens["top_1"]]
    assert all(any(c.startswith(e) for c in cells) for e in expected), (cells[:3], expected[:3])
    titles = [html.unescape(grid.layout.title.text), html.unescape(line.layout.title.text)]
    assert all(shown(lens["final_token"].iloc[0]) in t for t in titles), titles
    no_marks(strings(grid) + strings(line), "logit lens")
    assert not any(s.startswith(("' ", '" ')) or s == " " for s in cells)


@pytest.fixture(scope="module")
def byte_level_llama(tmp_path_factory):
    """A tiny random Llama whose tokenizer is a byte-level BPE (Ġ, Ċ), trained here on TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=320, initial_alphabet=alphabet, special_tokens=["<s>"])
    bpe.train_from_iterator([TEXT, "the dog was tired"] * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="<s>")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("bytelevel")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder), device="cpu")


def test_a_byte_level_model_spells_each_token_once_everywhere(byte_level_llama) -> None:
    labels = trace_model(byte_level_llama, TEXT).tokens
    assert any(t.startswith("Ġ") for t in labels) and any("Ċ" in t for t in labels), labels
    check_views(byte_level_llama, TEXT)


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma-3-270m"])
def llm(request):
    from tests.test_llms import _load_slice

    try:
        return _load_slice(request.param)[1]
    except OSError as err:  # pragma: no cover - files half there
        pytest.skip(f"{request.param}: {err}")


def test_a_real_llm_spells_each_token_once_everywhere(llm) -> None:
    text = "The animal was too tired.\n\nIt"
    ids = trace_model(llm, text).token_ids
    for i in ids:  # a whole token: its label and its text read the same
        assert shown(token_labels(llm.tokenizer, [i])[0]) == shown(piece_text(llm.tokenizer, i))
    assert "␣tired" in [shown(t) for t in token_labels(llm.tokenizer, ids)]
    assert "⏎" in "".join(shown(t) for t in token_labels(llm.tokenizer, ids))
    check_views(llm, text)
