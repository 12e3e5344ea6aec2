"""The interactive attention view for notebooks: an anywidget over attnviz/assets/js/attention.js,
the same ES module the app mounts as a Streamlit Components v2 component (attnviz.ui.hover).

`explorer(trace)` (what `attnviz.show(trace, view="explore")` returns) shows one layer's lines
(one head or all), the overview of every layer x head, layer and head pickers, hover or click a
token to isolate its lines, and what-if knobs computed in the browser from the weights: the
temperature of this layer's softmax (softmax(l/T) = w^(1/T) renormalised) and masked keys. Its
state (layer, head, token, temperature, threshold, masked) syncs back to Python.

Offline by construction: the module and the weights travel in the notebook, nothing is fetched.
Beside the widget, the display bundle carries the same module inlined in self-contained HTML, so
an exported notebook (nbconvert HTML) stays interactive without a widget manager.
"""

from __future__ import annotations

import base64
import html
import json
import uuid
from functools import cache
from pathlib import Path

import anywidget
import numpy as np
import traitlets

from attnviz.engine.trace import Trace

ESM = Path(__file__).resolve().parent.parent / "assets" / "js" / "attention.js"
MAX_WEIGHTS = 4_000_000  # floats sent to the browser (16 MB as float32); pass layers= to cut
LABELS = {
    "layer": "layer",
    "head": "head",
    "all_heads": "all heads",
    "temperature": "temperature",
    "threshold": "threshold",
    "query": "query",
    "key": "key",
    "masked": "masked",
    "what_if": "what-if (this layer's softmax, from its weights; later layers not rerun)",
    "hint": "Hover a token to isolate its lines; click to keep it; double-click a key to mask it. "
    "Click a head in the overview to show it.",
}


@cache
def module_source() -> str:
    return ESM.read_text(encoding="utf-8")


def payload(
    trace: Trace,
    layers: list[int] | None = None,
    heads_overview: bool = True,
    pickers: bool = True,
    labels: dict[str, str] | None = None,
) -> dict[str, object]:
    """What the module draws: tokens, the weights [layer, head, q, k] as float32 base64, labels."""
    layer_ids = list(range(trace.n_layers)) if layers is None else list(layers)
    for i in layer_ids:
        if not 0 <= i < trace.n_layers:
            raise ValueError(f"layer {i} is outside the trace: pick 0..{trace.n_layers - 1}")
    n_q, n_k = len(trace.tokens), len(trace.key_tokens)
    size = len(layer_ids) * trace.n_heads * n_q * n_k
    if size > MAX_WEIGHTS:
        raise ValueError(
            f"{len(layer_ids)} layers x {trace.n_heads} heads x {n_q} x {n_k} tokens is "
            f"{size:,} weights, over the widget's {MAX_WEIGHTS:,}: pass layers=[...] or a "
            "shorter text"
        )
    w = np.stack([trace.layers[i].weights.numpy() for i in layer_ids]).astype("<f4")
    return {
        "tokens": list(trace.tokens),
        "key_tokens": list(trace.key_tokens),
        "layer_ids": layer_ids,
        "weights": {"b64": base64.b64encode(w.tobytes()).decode("ascii"), "shape": list(w.shape)},
        "pickers": pickers,
        "overview": heads_overview,
        "labels": {**LABELS, **(labels or {})},
    }


class AttentionWidget(anywidget.AnyWidget):
    """One trace's attention, interactive. Read `.layer`, `.head` (-1: all heads), `.token`
    ("q3": query 3 isolated, "k2": key 2, "" none), `.temperature`, `.threshold` and `.masked`
    (masked key positions) after interacting; set them to drive the view from Python."""

    _esm = traitlets.Unicode().tag(sync=True)
    data = traitlets.Dict().tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(-1).tag(sync=True)
    token = traitlets.Unicode("").tag(sync=True)
    temperature = traitlets.Float(1.0).tag(sync=True)
    threshold = traitlets.Float(0.01).tag(sync=True)
    masked = traitlets.List(traitlets.Int()).tag(sync=True)

    def __init__(self, **kwargs) -> None:
        super().__init__(_esm=module_source(), **kwargs)

    def state(self) -> dict[str, object]:
        names = ("layer", "head", "token", "temperature", "threshold", "masked")
        return {n: getattr(self, n) for n in names}

    def static_html(self) -> str:
        """The same module inlined in one self-contained HTML fragment with a stand-in model, for
        exported notebooks: interactive without Jupyter, nothing fetched."""
        blob = json.dumps({"data": self.data, "state": self.state()})
        # "</" cannot end the script early; tokens stay data (the module writes them as text)
        blob = blob.replace("</", "<\\/")
        src = json.dumps(module_source()).replace("</", "<\\/")
        box = f"attnviz-{uuid.uuid4().hex}"
        return (
            f'<div class="attnviz-static-widget" id="{box}"></div><script type="module">'
            f"const src = {src}; const given = {blob};"
            "const url = URL.createObjectURL(new Blob([src], {type: 'text/javascript'}));"
            "const mod = await import(url);"
            f"const el = document.getElementById('{box}');"
            "const values = {...given.state, data: given.data};"
            "const model = {get: (n) => values[n], set: (n, v) => { values[n] = v; },"
            " save_changes() {}, on() {}, off() {}};"
            "mod.default().render({model, el});</script>"
        )

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if data is not None:
            data["text/html"] = self.static_html()
            data["text/plain"] = html.unescape(repr(self))
        return bundle

    def __repr__(self) -> str:
        return f"<attnviz widget: layer {self.layer}, head {self.head}, token {self.token!r}>"


def explorer(trace: Trace, layer: int = 0, head: int = -1, **kwargs) -> AttentionWidget:
    """The interactive view of `trace` (see the module's docstring); kwargs go to `payload`."""
    widget = AttentionWidget(data=payload(trace, **kwargs))
    widget.layer, widget.head = layer, head
    return widget
