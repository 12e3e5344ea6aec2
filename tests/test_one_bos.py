"""A text that starts with the BOS a tokenizer adds anyway (a chat template's own {{ bos_token }},
Gemma 3's GGUF pitfall) is read with one BOS, not two: traced and generated from alike."""

from __future__ import annotations

import attnviz
from attnviz.engine.generate import prompt_ids


def test_a_written_out_bos_is_not_doubled() -> None:
    model = attnviz.load_model("attnviz-char-zh-en", device="cpu")
    bos = model.tokenizer.bos_token
    assert model.call_tokenizer("the cat")["input_ids"][0] == model.tokenizer.bos_token_id
    plain = attnviz.trace_model(model, "the cat")
    written = attnviz.trace_model(model, f"{bos}the cat")
    assert written.tokens == plain.tokens and written.tokens.count(bos) == 1
    assert written.token_ids == plain.token_ids
    assert prompt_ids(model, f"{bos}the cat") == prompt_ids(model, "the cat")
    # a BOS later in the text is the user's: kept
    later = attnviz.trace_model(model, f"the {bos}cat")
    assert later.tokens.count(bos) == 2
