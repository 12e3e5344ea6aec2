"""Two sessions with different what-if knobs, interleaved, each equal to its own result.

App level: a real `streamlit run` server and two websocket sessions (tests/wsclient.py), as two
browser tabs: Streamlit runs each session's script in its own thread of one process, sharing the
cached model and the trace cache, which is where cross-talk would come from. AppTest cannot do this:
it swaps a process-wide Runtime in and out around each run, so two AppTests in two threads break
each other. Each session changes its knobs on every rerun (so every rerun computes a new trace,
no cache hit), both reruns start together at a barrier, and every figure and number each session
gets is compared with the engine's result for that session's knobs, computed alone in this process.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from streamlit.proto.WidgetStates_pb2 import WidgetState

from attnviz.engine.hooked import embedding_cosine, load_model, trace_model
from attnviz.measures.stats import weight_shift
from attnviz.ui.sidebar import DEFAULT_TEXT
from tests.apphelpers import decode
from tests.wsclient import Session, chart_specs, server

ROUNDS = 8
KNOBS = {  # session -> (use_scale, temperatures, one per round)
    "A": (True, [0.40 + 0.05 * i for i in range(ROUNDS)]),
    "B": (False, [2.0 + 0.25 * i for i in range(ROUNDS)]),
}


@pytest.fixture(scope="module")
def bundled():
    return load_model(device="cpu")


def _by_key(drawn: dict, key: str) -> dict:
    charts = {c.id.rsplit("-", 1)[-1]: c for c in drawn.get("plotly_chart", [])}
    return chart_specs({"plotly_chart": [charts[key]]})[0]


def test_two_sessions_with_different_knobs_interleaved(bundled) -> None:
    results: dict[str, list] = {name: [] for name in KNOBS}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(KNOBS), timeout=300)
    with server() as (port, _):

        def session(name: str) -> None:
            use_scale, temperatures = KNOBS[name]
            try:
                tab = Session(port)
                tab.run(page="pretrained")  # draws the knobs: their widget ids come back
                deadline = time.monotonic() + 180
                while "wi_temp" not in tab.elements and time.monotonic() < deadline:
                    # a fresh server shows the loader's progress until the bundled model is ready
                    time.sleep(0.5)
                    tab.run(page="pretrained")
                for temperature in temperatures:
                    states = [
                        WidgetState(id=tab.widget("wi_temp"), double_value=temperature),
                        WidgetState(id=tab.widget("wi_scale"), bool_value=use_scale),
                    ]
                    barrier.wait()  # both sessions rerun at the same moment
                    drawn = tab.run(page="pretrained", widgets=states)
                    assert "exception" not in drawn, drawn.get("exception")
                    results[name].append(
                        {
                            "shift": decode(_by_key(drawn, "shift")["data"][0]["z"]),
                            "weights": decode(_by_key(drawn, "detail_weights")["data"][0]["z"]),
                            "cosine": float(drawn["metric"][0].body),
                        }
                    )
                tab.close()
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)
                barrier.abort()

        threads = [threading.Thread(target=session, args=(name,)) for name in KNOBS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
    assert not errors, errors
    base = trace_model(bundled, DEFAULT_TEXT)
    for name, (use_scale, temperatures) in KNOBS.items():
        assert len(results[name]) == ROUNDS
        for got, temperature in zip(results[name], temperatures, strict=True):
            alone = trace_model(bundled, DEFAULT_TEXT, use_scale=use_scale, temperature=temperature)
            shift = weight_shift(alone, base).numpy()  # [layer, head]
            np.testing.assert_allclose(got["shift"], shift, atol=1e-5)
            weights = alone.layers[0].weights[0].numpy()  # [q, k] the detail view's L0 H0
            np.testing.assert_allclose(got["weights"], weights, atol=1e-6)
            assert abs(got["cosine"] - embedding_cosine(alone, base)) <= 6e-5  # shown as %.4f
    # The two sessions' knobs give different pictures: cross-talk could not hide.
    assert not np.allclose(results["A"][0]["shift"], results["B"][0]["shift"])


def test_engine_threads_with_different_knobs_equal_their_sequential_results(bundled) -> None:
    knobs = [
        {"temperature": 0.5},
        {"temperature": 3.0, "use_scale": False},
        {"ablate": [(0, 1), (3, 7)]},
        {"mask_tokens": [2, 3]},
        {"text_pair": "It was very tired."},
        {"max_length": 6},
    ] * 3
    alone = [trace_model(bundled, DEFAULT_TEXT, **k) for k in knobs]
    together: list = [None] * len(knobs)

    def work(i: int) -> None:
        together[i] = trace_model(bundled, DEFAULT_TEXT, **knobs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(knobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for a, b in zip(alone, together, strict=True):
        assert a.tokens == b.tokens
        for la, lb in zip(a.layers, b.layers, strict=True):
            torch.testing.assert_close(la.weights, lb.weights, atol=0, rtol=0)  # bit-identical
            torch.testing.assert_close(la.output, lb.output, atol=0, rtol=0)
