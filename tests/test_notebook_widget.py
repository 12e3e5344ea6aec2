"""The notebook widget (attnviz.views.widget) and its static fallback, in headless Chromium:
hover and click isolate a token's lines, a double-click masks a key, the temperature knob
recomputes this layer's softmax from its weights (checked against torch), tokens stay text."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import attnviz
from attnviz.views.widget import MAX_WEIGHTS, AttentionWidget, payload

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
EVIL = "the cat <img src=x onerror=alert(1)> sat"


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace_text(EVIL, attnviz.StackConfig(d_model=16, n_heads=4, n_layers=2))


def test_the_widget_carries_the_module_and_the_weights_exactly(trace) -> None:
    w = attnviz.show(trace, view="explore", layer=1, head=2)
    assert isinstance(w, AttentionWidget) and (w.layer, w.head) == (1, 2)
    assert "export default function attnviz" in w._esm
    data, _ = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/html"].count('<script type="module">') == 1
    assert "https://" not in w._esm and "http://" not in w._esm.replace("http://www.w3.org", "")
    sent = payload(trace)
    import base64

    import numpy as np

    raw = np.frombuffer(base64.b64decode(sent["weights"]["b64"]), "<f4").reshape(
        sent["weights"]["shape"]
    )
    torch.testing.assert_close(torch.from_numpy(raw.copy()), trace.weights(), atol=0, rtol=0)
    with pytest.raises(ValueError, match="layer 7 is outside"):
        payload(trace, layers=[7])
    assert MAX_WEIGHTS >= 6 * 12 * 128 * 128  # the bundled model at 128 tokens fits
    zh = attnviz.show(trace, view="explore", lang="zh")
    assert zh.data["labels"]["temperature"] == "温度" and zh.data["labels"]["query"] != "query"


def test_the_static_widget_isolates_masks_and_recomputes(trace, browser, tmp_path) -> None:
    w = attnviz.show(trace, view="explore", layer=1, head=2)
    page_file = tmp_path / "w.html"
    page_file.write_text("<meta charset=utf-8><body>" + w.static_html(), encoding="utf-8")
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: errors.append("dialog: " + d.message))
    page.goto(page_file.as_uri())
    page.wait_for_selector("svg[data-role=lines] text[data-token=q0]")
    lines = lambda: int(page.get_attribute("svg[data-role=lines]", "data-lines"))  # noqa: E731
    n = len(trace.tokens)
    row = trace.layers[1].weights[2]  # [q, k]
    assert lines() == int((row >= 0.01).sum())
    evil = [i for i, t in enumerate(trace.tokens) if "<" in t or "img" in t]
    assert evil and page.locator("img").count() == 0  # the token is text, not an element
    page.hover("text[data-token=q3]")
    assert lines() == int((row[3] >= 0.01).sum())  # only query 3's lines
    page.mouse.move(1, 1)
    assert lines() == int((row >= 0.01).sum())
    page.click("text[data-token=k1]")
    page.mouse.move(1, 1)
    assert lines() == int((row[:, 1] >= 0.01).sum())  # kept after the mouse leaves
    assert page.get_attribute("svg[data-role=lines]", "data-focus") == "k1"
    page.click("text[data-token=k1]")  # a second click clears it
    page.mouse.move(1, 1)
    assert lines() == int((row >= 0.01).sum())
    # temperature 2 on this layer's softmax: w^(1/2) renormalised == softmax(logits / 2)
    page.eval_on_selector("input[data-role=temperature]",
                          "e => { e.value = 2; e.dispatchEvent(new Event('input')); }")  # fmt: skip
    hot = torch.softmax(trace.layers[1].logits()[2] / 2, -1)  # [q, k]
    assert lines() == int((hot >= 0.01).sum())
    title = page.locator("svg[data-role=lines] line[data-q='3'][data-k='0'] title")
    shown = float(title.text_content().split(": ")[1].split(" ")[0])
    assert abs(shown - float(hot[3, 0])) < 1e-4  # the browser's number is torch's
    page.dblclick("text[data-token=k0]")  # mask key 0
    assert "masked" in page.locator("[data-role=status]").inner_text()
    masked = hot.clone()
    masked[:, 0] = 0
    masked = masked / masked.sum(-1, keepdim=True)
    page.mouse.move(1, 1)
    assert lines() == int((masked >= 0.01).sum())
    # the overview: a click on layer 0, head 1 shows that head
    box = page.locator("canvas[data-role=overview]").bounding_box()
    page.mouse.click(box["x"] + 18 + 1.5 * (56 + 4), box["y"] + 18 + 10)
    assert page.input_value("select[data-role=layer]") == "0"
    assert page.input_value("select[data-role=head]") == "1"
    assert not errors, errors
    assert n == len(json.loads(json.dumps(trace.tokens)))
    page.close()
