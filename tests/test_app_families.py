"""The Pretrained model page in AppTest, on tiny random decoders and an encoder-decoder loaded
from folders: every view draws, the weights drawn are the model's, the knobs move the next token."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

from attnviz.ui.explorer import VIEWS
from attnviz.ui.sidebar import DEFAULT_TEXT
from tests.apphelpers import app, heatmap_specs, specs, z_of
from tests.test_families import CONFIGS, save

PAGE = "app_pages/pretrained.py"
FAMILIES = ("gpt2", "llama", "qwen2", "mistral", "bart")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    from transformers import AutoTokenizer, BartConfig

    from attnviz.engine.hooked import resolve

    tokenizer = AutoTokenizer.from_pretrained(resolve(None)[0])
    found = {}
    for family in FAMILIES:
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(family)
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
        found[family] = save(folder, model, tokenizer)
    return found


def every_view(at) -> None:
    for view in VIEWS:
        at.session_state["view"] = view
        at.run()
        assert not at.exception, (view, at.exception)
        assert not at.error, (view, [e.value for e in at.error])
        assert specs(at) or view == "stats", view


@pytest.mark.parametrize("family", FAMILIES)
def test_every_view_draws_for_each_family(folders, family) -> None:
    at = app(PAGE, query={"model": folders[family], "device": "cpu"})
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    every_view(at)
    if family == "bart":
        for part in ("decoder", "cross"):
            at.session_state["part"] = part
            every_view(at)


@pytest.mark.parametrize("family", ("llama", "mistral"))
def test_detail_weights_are_the_models_and_knobs_move_the_next_token(folders, family) -> None:
    from attnviz.engine.hooked import load_model, trace_model

    at = app(PAGE, query={"model": folders[family], "device": "cpu", "view": "detail"})
    ref = trace_model(load_model(folders[family], device="cpu"), DEFAULT_TEXT)
    weights = z_of(heatmap_specs(at)[-1])  # detail: scores, logits, weights of L0 H0
    want = ref.layers[0].weights[0].numpy()
    if ref.layers[0].mask is not None:  # a decoder: a later key is masked, drawn as masked
        want = np.where(ref.layers[0].mask.numpy(), want, np.nan)
    np.testing.assert_allclose(weights, want, atol=1e-6)
    bars = [s for s in specs(at) if s["data"][0].get("orientation") == "h"]
    assert len(bars) == 1 and len(bars[0]["data"]) == 1  # next tokens, nothing to compare yet
    at.multiselect(key="wi_silence").set_value(["L1H0", "L1H3"]).run()
    assert not at.exception
    bars = [s for s in specs(at) if s["data"][0].get("orientation") == "h"]
    assert len(bars[0]["data"]) == 2  # with the knobs, and unchanged beside them
    assert any("unchanged" in c.value for c in at.caption)


def test_encoder_decoder_silences_cross_heads_by_name(folders) -> None:
    at = app(PAGE, query={"model": folders["bart"], "device": "cpu", "view": "heads"})
    at.session_state["part"] = "cross"
    at.run()
    at.multiselect(key="wi_silence").set_value(["X0H1"]).run()
    assert not at.exception and float(at.metric[0].value) <= 1.0
    maps = heatmap_specs(at)
    shift = next(s for s in maps if "moved" in s["layout"]["title"]["text"])
    moved = z_of(shift)  # [layer, head] of the cross-attention
    assert moved.shape == (2, 4) and moved[0].max() == 0  # layer 0 weights come before its W_O
    assert moved[1].max() > 0  # layer 1's queries come after the silenced head
    head = next(s for s in maps if s["layout"]["title"]["text"].startswith("head 0"))
    n_dec, n_enc = z_of(head).shape  # decoder reads [start] + the sentence again
    assert n_dec == n_enc + 1


def test_sharing_page_shows_a_real_models_grouping(folders) -> None:
    at = app("app_pages/sharing.py", query={"sh_model": folders["llama"]})
    assert not at.exception, at.exception
    text = "\n".join(m.value for m in at.markdown)
    assert "GQA" in text and "4 query heads share 2 K/V heads" in text
    check = next(m for m in at.metric if "expand" in m.label)
    assert float(check.value) < 1e-5
    titles = [s["layout"]["title"]["text"] for s in heatmap_specs(at)]
    assert sum("kv head" in x for x in titles) == 2


def test_sharing_page_picks_a_bundled_decoder() -> None:
    """The lesson's MHA·MQA·GQA page offers the bundled decoders in a picker (none by default):
    the char model's 8 query heads share 2 K/V heads."""
    at = app("app_pages/sharing.py")
    assert not at.exception and at.selectbox(key="sh_pick").value == ""
    at = app("app_pages/sharing.py", query={"sh_pick": "attnviz-char-zh-en", "lang": "中文"})
    assert not at.exception, at.exception
    assert at.selectbox(key="sh_pick").value == "attnviz-char-zh-en"
    assert any("8 个查询头共享 2 个 K/V 头" in m.value for m in at.markdown)
    assert any("GPL-3.0-or-later" in c.value and "由 attnviz 训练" in c.value for c in at.caption)


def test_sharing_page_starts_with_the_model_loaded_on_the_pretrained_page(folders) -> None:
    at = app(PAGE, query={"model": folders["mistral"], "device": "cpu"})
    assert not at.exception
    at.switch_page("app_pages/sharing.py")
    at.run()
    assert not at.exception, at.exception
    assert at.text_input(key="sh_model").value == folders["mistral"]
    assert any("4 query heads share 2 K/V heads" in m.value for m in at.markdown)
    # An MHA model (the bundled BERT) has no grouping to show: the field keeps the GQA one.
    at.switch_page(PAGE)
    at.query_params.clear()
    at.run()
    at.text_input(key="model").set_value("").run()  # the bundled model
    assert not at.exception and any("(MHA)" in c.value for c in at.caption)
    at.switch_page("app_pages/sharing.py")
    at.run()
    assert at.text_input(key="sh_model").value == folders["mistral"]
