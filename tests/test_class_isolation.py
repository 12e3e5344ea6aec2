"""A class on a real LLM: students whose sentences arrive at the same moment share forwards, and
none sees another's sentence or knobs.

App level: a real `streamlit run` on SmolLM2-135M and eight websocket sessions (tests/wsclient.py),
each with its own sentence (of its own length), head and what-if temperature (two groups: four
sessions at 1.0, four at 2.0, so that each group may share a forward), rerunning together at a
barrier, twice. Every Head detail map a session gets is compared with the engine's trace of that
session's sentence and knobs, made alone in this process. In-process: the Pretrained page's
trace path (attnviz.ui.models.model_trace) called by eight threads at once runs one forward per
group, and each trace is the sentence's own.
"""

from __future__ import annotations

import threading
import time
import urllib.parse

import numpy as np
import pytest
import torch
from streamlit.proto.WidgetStates_pb2 import WidgetState

from attnviz.engine.bundled import registry_file
from attnviz.engine.hooked import load_model, trace_model
from tests.apphelpers import decode
from tests.wsclient import Session, chart_specs, server

pytestmark = pytest.mark.skipif(
    registry_file("smollm2-135m") is None, reason="smollm2-135m is not installed (make test does)"
)
NAME = "smollm2-135m"
WORDS = [
    "cat",
    "dog",
    "river",
    "city",
    "house",
    "teacher",
    "student",
    "book",
    "light",
    "water",
    "tree",
    "stone",
    "road",
]


def _sentence(i: int, round_: int) -> str:
    """Session i's sentence in a round: 6 + i + round_ words, so every length differs."""
    return " ".join(WORDS[(i * 3 + j + round_) % len(WORDS)] for j in range(6 + i + 2 * round_))


def _knobs(i: int) -> tuple[float, int, int]:
    """Session i's temperature, layer and head."""
    return (1.0 if i % 2 == 0 else 2.0), (3 * i) % 30, i % 9


@pytest.fixture(scope="module")
def smollm2():
    return load_model(NAME, device="cpu")


def _weights(drawn: dict) -> np.ndarray:
    charts = {c.id.rsplit("-", 1)[-1]: c for c in drawn.get("plotly_chart", [])}
    return decode(chart_specs({"plotly_chart": [charts["detail_weights"]]})[0]["data"][0]["z"])


def test_students_typing_at_once_each_get_their_own_trace(smollm2) -> None:
    n = 8
    got: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(n, timeout=300)
    with server() as (port, _):

        def student(i: int) -> None:
            temperature, layer, head = _knobs(i)
            try:
                tab = Session(port)
                query = {"pick": NAME, "view": "detail", "layer": layer, "head": head,
                         "wi_temp": temperature}  # fmt: skip
                first = urllib.parse.urlencode({**query, "text": _sentence(i, 0)})
                deadline = time.monotonic() + 240
                barrier.wait()  # every session opens its link at the same moment
                drawn = tab.run(page="pretrained", query=first)
                while "detail_weights" not in {
                    c.id.rsplit("-", 1)[-1] for c in drawn.get("plotly_chart", [])
                }:
                    assert "exception" not in drawn, drawn.get("exception")
                    assert time.monotonic() < deadline, "Head detail was not drawn"
                    time.sleep(0.5)  # the model loads on the first visit
                    drawn = tab.run(page="pretrained", query=first)
                got[(i, 0)] = _weights(drawn)
                state = WidgetState(id=tab.widget("text"), string_value=_sentence(i, 1))
                barrier.wait()  # and types a new sentence at the same moment
                drawn = tab.run(page="pretrained", query=first, widgets=[state])
                assert "exception" not in drawn, drawn.get("exception")
                got[(i, 1)] = _weights(drawn)
                tab.close()
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)
                barrier.abort()

        threads = [threading.Thread(target=student, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
    assert not errors, errors
    for (i, round_), weights in got.items():
        temperature, layer, head = _knobs(i)
        alone = trace_model(smollm2, _sentence(i, round_), temperature=temperature)
        lt = alone.layers[layer]
        want = np.where(lt.mask.numpy(), lt.weights[head].numpy(), np.nan)  # masked: blank
        assert weights.shape == want.shape, (i, round_)  # its own sentence, not another's
        np.testing.assert_allclose(weights, want, atol=5e-5)
    assert len(got) == 2 * n


def test_the_pages_traces_share_one_forward_per_group(smollm2, monkeypatch) -> None:
    from attnviz.serve import tracing
    from attnviz.ui import models

    batcher = tracing.Batcher(1, tracing.BATCH_MAX, "test-class")
    monkeypatch.setattr(tracing, "pool", lambda: batcher)
    seen: list[list] = []
    real = tracing.run_model
    monkeypatch.setattr(tracing, "run_model", lambda m, items: seen.append(items) or real(m, items))
    hold = threading.Event()
    batcher.submit(None, None, lambda items: hold.wait(30) and [None])  # the worker is busy
    out: dict[int, object] = {}

    def page(i: int) -> None:
        temperature = _knobs(i)[0]
        request = models.request(smollm2, _sentence(i, 0), temperature=temperature)
        out[i] = models.model_trace(smollm2, request)

    threads = [threading.Thread(target=page, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    while batcher.waiting() < 8:
        time.sleep(0.01)
    hold.set()
    for t in threads:
        t.join(120)
    # one forward per temperature, four sentences each, each trace its own sentence's
    assert sorted(len(items) for items in seen) == [4, 4]
    for i, trace in out.items():
        alone = trace_model(smollm2, _sentence(i, 0), temperature=_knobs(i)[0])
        assert trace.tokens == alone.tokens and trace.request.text == _sentence(i, 0)
        for a, b in zip(trace.layers, alone.layers, strict=True):
            torch.testing.assert_close(a.weights, b.weights, atol=5e-5, rtol=1e-4)


def test_a_hook_added_during_another_threads_forward_leaves_that_forward_alone() -> None:
    """torch marks a `with_kwargs` hook as taking keyword arguments a moment after adding it: a
    forward in another thread can call it in between without them. The hooks that read a call's
    kwargs answer such a call with None (it raised TypeError in a class of eight), and run as
    written when called as registered."""
    from attnviz.engine.hooked.hooks import forward_hook, forward_pre_hook

    seen = []
    layer = torch.nn.Linear(2, 2)
    forward_hook(layer, lambda m, args, kwargs, out: seen.append(("after", kwargs)))
    forward_pre_hook(layer, lambda m, args, kwargs: seen.append(("before", kwargs)))
    (after,) = layer._forward_hooks.values()
    (before,) = layer._forward_pre_hooks.values()
    x = torch.ones(1, 2)
    assert after(layer, (x,), x) is None and before(layer, (x,)) is None  # the half-added call
    assert seen == []
    layer(x)
    assert seen == [("before", {}), ("after", {})]
