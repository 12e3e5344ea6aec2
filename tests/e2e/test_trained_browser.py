"""The bundled trained decoder on the Pretrained model page, by its name, in a real browser, in
both languages: the page loads it offline and draws its heads and next-character top 10. ([UNK]
is not checked for: the page's own text names it, and the model may predict it.)"""

from __future__ import annotations

from urllib.parse import quote

import pytest

CHARTS = '[data-testid="stPlotlyChart"]'
NAME = "attnviz-char-zh-en"
LINE = quote("床前明月光，疑是地上", safe="")


@pytest.mark.parametrize(("size", "lang"), [("page", "中文"), ("big_page", "English")])
def test_trained_model_opens_by_name(size: str, lang: str, request) -> None:
    p = request.getfixturevalue(size)
    p.open(
        f"pretrained?model={NAME}&device=cpu&text={LINE}&lang={quote(lang)}&view=detail&layer=3&head=5"
    )
    assert p.wait_count(CHARTS, 3, timeout=90, at_least=True) >= 3
    body = p.page.inner_text("body")
    kv = "2 个 K/V 头" if lang == "中文" else "2 K/V heads"
    assert NAME in body and "llama" in body and kv in body
    p.shot(f"pretrained-trained-{'zh' if lang == '中文' else 'en'}")
