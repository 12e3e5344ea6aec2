"""The Pretrained model page on a tiny random Llama (GQA) and BART, loaded from folders, in a real
browser: the overview, the next-token diff under a knob, cross-attention, the real grouping."""

from __future__ import annotations

from urllib.parse import quote

import pytest

CHARTS = '[data-testid="stPlotlyChart"]'


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    return _build(tmp_path_factory)


def _build(tmp_path_factory) -> dict[str, str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, BartConfig

    from attnviz.engine.hooked import resolve
    from tests.test_families import CONFIGS, save

    tokenizer = AutoTokenizer.from_pretrained(resolve(None)[0])
    found = {}
    for family in ("llama", "bart"):
        torch.manual_seed(0)
        if family == "bart":
            config = BartConfig(
                vocab_size=30522, d_model=32, encoder_layers=2, decoder_layers=2,
                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                decoder_ffn_dim=64, max_position_embeddings=64,
                pad_token_id=tokenizer.pad_token_id, decoder_start_token_id=tokenizer.cls_token_id,
            )  # fmt: skip
            model = AutoModelForSeq2SeqLM.from_config(config)
        else:
            model = AutoModelForCausalLM.from_config(CONFIGS[family]())
        found[family] = save(tmp_path_factory.mktemp(family), model, tokenizer)
    return found


# Each page is opened once, then checked and shot at both window sizes (Page.sizes).
def test_decoder_page_and_next_token_diff(folders, page) -> None:
    p = page
    model = quote(folders["llama"], safe="")
    p.open(f"pretrained?model={model}&device=cpu")
    for _ in p.sizes():
        assert p.wait_count(CHARTS, 5, timeout=90, at_least=True) >= 5
        assert "llama · decoder (causal)" in p.page.inner_text("body")
        assert "2 K/V heads (GQA)" in p.page.inner_text("body")
        p.shot("pretrained-llama")
    p.open(f"pretrained?model={model}&device=cpu&wi_silence=L1H0&wi_silence=L1H2&view=detail")
    for _ in p.sizes():
        assert p.wait_count('[data-testid="stMetric"]', 3, timeout=60) == 3  # the what-if row
        # the legend of the next-token chart, drawn after the script ends
        p.page.get_by_text("p unchanged").first.wait_for(timeout=30_000)
        p.shot("pretrained-llama-what-if")


def test_encoder_decoder_cross_attention(folders, page) -> None:
    p = page
    model = quote(folders["bart"], safe="")
    p.open(f"pretrained?model={model}&device=cpu&part=cross&view=heads")
    for _ in p.sizes():
        assert p.wait_count(CHARTS, 5, timeout=90, at_least=True) >= 5
        assert p.page.get_by_text("Cross-attention").count() >= 1
        p.shot("pretrained-bart-cross")


def test_sharing_page_real_grouping(folders, big_page) -> None:
    big_page.open(f"sharing?sh_model={quote(folders['llama'], safe='')}")
    assert "4 query heads share 2 K/V heads" in big_page.page.inner_text("body")
    big_page.shot("sharing-real-gqa")


def test_decoder_page_in_chinese(folders, big_page) -> None:
    model = quote(folders["llama"], safe="")
    big_page.open(f"pretrained?model={model}&device=cpu&lang=中文&wi_scale=false")
    assert big_page.wait_count('[data-testid="stMetric"]', 3, timeout=90) == 3  # the what-if row
    big_page.page.get_by_text("原模型的 p").first.wait_for(timeout=30_000)  # chart legend
    body = big_page.page.inner_text("body")
    assert "预训练模型" in body and "解码器（因果）" in body
    big_page.shot("pretrained-llama-zh")


def test_bundled_bert_still_loads_by_default(big_page) -> None:
    big_page.open("pretrained")
    assert big_page.wait_count(CHARTS, 4, timeout=90, at_least=True) >= 4
    assert "bert · encoder · 6 layers × 12 heads · 12 K/V heads (MHA)" in big_page.page.inner_text(
        "body"
    )
    big_page.shot("pretrained-bundled-bert")
