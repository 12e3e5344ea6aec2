"""Serving a class: byte-bounded caches, compact traces that convert on access, the
overview as a PNG that a head change does not resend, downloads built on demand, warm-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import replace

import numpy as np
import pytest
import torch

from attnviz import StackConfig, trace_text
from attnviz.engine.trace import LayerTrace, compact, pooled_weights, to_view
from attnviz.serve.bytecache import ByteCache
from attnviz.views import images
from attnviz.views import spec as figure_spec
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from tests.apphelpers import ROOT, app, image_pixels, specs


def picture(w, title: str):
    """A weights map drawn as a picture, as a long head's preview is."""
    x, y = Axis(["k"] * w.shape[1]), Axis(["q"] * w.shape[0])
    return draw_map(w, x, y, Colour(), Marks(values=False), Frame(title))


def _png(uri: str) -> np.ndarray:
    return image_pixels({"source": uri})


def test_png_data_uri_is_lossless_with_and_without_a_palette() -> None:
    rng = np.random.default_rng(0)
    few = rng.integers(0, 4, (20, 30, 3), dtype=np.uint8) * 60  # 64 colours: palette
    many = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)  # >256 colours: RGB
    for img in (few, many):
        np.testing.assert_array_equal(_png(images.png_data_uri(img)), img)


def test_mosaic_is_a_small_image_and_the_same_from_pooled_weights() -> None:
    w = torch.softmax(torch.randn(6, 12, 300, 300) * 3, -1)  # [layer, head, q, k]
    fig = images.mosaic(w)
    spec = json.loads(fig.to_json())
    assert "z" not in spec["data"][0]  # no raw RGB array in the JSON
    assert len(fig.to_json()) < 400_000  # it was ~1.9 MB as a raw array
    trace = trace_text("a b c d e f g h i j", StackConfig(d_model=16, n_heads=4, n_layers=2))
    full = images.mosaic(trace.weights())
    pooled = images.mosaic(pooled_weights(trace, 48, 48))
    assert full.data[0].source == pooled.data[0].source
    big = torch.softmax(torch.randn(2, 3, 100, 90), -1)  # [layer, head, q, k]
    lt = [LayerTrace(big[i], big[i], big[i], big[i], 1.0, None, big[i], big[i], big[i, 0])
          for i in range(2)]  # fmt: skip
    from attnviz.engine.trace import Trace

    tr = Trace(tokens=[str(i) for i in range(100)], layers=lt, source="t")
    ref = torch.nn.functional.adaptive_avg_pool2d(big.flatten(0, 1), (48, 48)).view(2, 3, 48, 48)
    torch.testing.assert_close(pooled_weights(tr, 48, 48), ref)


def test_layer_trace_stores_any_dtype_and_reads_cpu_float32() -> None:
    w = torch.softmax(torch.randn(4, 5, 5), -1).to(torch.bfloat16)  # [head, q, k]
    q = torch.randn(4, 5, 8, dtype=torch.float64)  # [head, q, d]
    lt = LayerTrace(q, q, q, w, 0.5, torch.ones(5, 5, dtype=torch.bool), w, q, q[0])
    assert lt.stored("weights").dtype == torch.bfloat16  # at rest as given
    assert lt.weights.dtype == torch.float32 and lt.weights.device.type == "cpu"
    assert lt.mask.dtype == torch.bool
    torch.testing.assert_close(lt.head("weights", 2), w[2].float())
    assert lt.head("weights", 2).shape == (5, 5)
    assert lt.n_heads == 4 and lt.x is None
    f32 = torch.zeros(3)
    assert to_view(f32) is f32  # CPU float32 is not copied


def test_compact_recomputes_scores_and_keeps_every_view_value() -> None:
    trace = trace_text(
        "the animal did not cross the street", StackConfig(d_model=32, n_heads=4, n_kv_heads=2)
    )
    small = compact(trace)
    score_bytes = sum(layer.scores.numel() * 4 for layer in trace.layers)
    assert trace.nbytes() - small.nbytes() == score_bytes  # n x n per head, the big part at n=512
    assert callable(small.layers[0].__dict__["_stored_scores"])  # not kept: q·k on access
    for a, b in zip(trace.layers, small.layers, strict=True):
        for name in ("q", "k", "v", "weights", "z", "output"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        torch.testing.assert_close(b.scores, a.scores, rtol=1e-5, atol=1e-5)
    half = compact(trace, half=("v", "z"))
    assert half.layers[0].stored("z").dtype == torch.float16
    assert half.layers[0].z.dtype == torch.float32
    torch.testing.assert_close(half.layers[0].z, trace.layers[0].z, rtol=2e-3, atol=2e-3)


def test_compact_checks_every_layer_s_scores_against_q_k_as_allclose_would() -> None:
    """compact checks all layers of a shape in one product: a layer whose scores are q·k is
    recomputed, one whose scores are off by more than 1e-4 or hold a NaN keeps them, exactly
    where a per-layer torch.allclose(q·k, scores, 1e-4, 1e-4) says so; compacting twice changes
    nothing."""
    from attnviz.engine.layer import scores_close_to_qk

    trace = trace_text(
        "the animal did not cross the street",
        StackConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=4, causal=True),
    )
    layers = [replace_scores(lt, lt.scores.clone()) for lt in trace.layers]
    layers[1].scores[2, 3, 1] += 1e-2
    layers[2].scores[0, 0, 0] = float("nan")
    layers[3].scores[1, 4, 2] += 5e-6  # within the tolerance
    wanted = [
        torch.allclose(lt.q @ lt.k.repeat_interleave(2, 0).transpose(-1, -2), lt.scores,
                       rtol=1e-4, atol=1e-4)
        for lt in layers
    ]  # fmt: skip
    assert wanted == [True, False, False, True]
    assert scores_close_to_qk(layers) == wanted
    small = compact(replace(trace, layers=layers))
    kept = [isinstance(lt.raw("scores"), torch.Tensor) for lt in small.layers]
    assert kept == [not ok for ok in wanted]
    torch.testing.assert_close(small.layers[1].scores, layers[1].scores, equal_nan=True)
    again = compact(small)
    assert [isinstance(lt.raw("scores"), torch.Tensor) for lt in again.layers] == kept


def replace_scores(layer: LayerTrace, scores: torch.Tensor) -> LayerTrace:
    """A copy of `layer` with its own scores tensor."""
    fields = {f: layer.stored(f) for f in ("q", "k", "v", "mask", "weights", "z", "output")}
    return LayerTrace(scale=layer.scale, scores=scores, **fields)


def test_one_head_of_a_compact_trace_computes_only_that_head(monkeypatch) -> None:
    """Head detail and One query read one head: a compact trace computes that head's q·k
    ([q, k], not [head, q, k]), equal to the full trace's; its logits are masked like logits()."""
    trace = trace_text(
        "the animal did not cross the street",
        StackConfig(d_model=32, n_heads=4, n_kv_heads=2, causal=True),
    )
    small = compact(trace)
    shapes = []
    real_matmul = torch.Tensor.__matmul__

    def counting(a, b):
        out = real_matmul(a, b)
        shapes.append(tuple(out.shape))
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", counting)
    for a, b in zip(trace.layers, small.layers, strict=True):
        for h in range(4):
            shapes.clear()
            torch.testing.assert_close(b.head("scores", h), a.scores[h], rtol=1e-5, atol=1e-5)
            n = len(trace.tokens)
            assert shapes == [(n, n)]  # one head's q·k, nothing more
            logits = b.head_logits(h)
            torch.testing.assert_close(logits, a.logits()[h], rtol=1e-5, atol=1e-5)
            assert torch.isneginf(logits[~a.mask]).all()


def test_compact_keeps_scores_that_are_not_q_dot_k() -> None:
    trace = trace_text("one two three", StackConfig(d_model=16, n_heads=2))
    layer = trace.layers[0]
    layer.scores = layer.scores + 1.0  # e.g. a model that adds a bias before the softmax
    kept = compact(trace).layers[0]
    assert isinstance(kept.__dict__["_stored_scores"], torch.Tensor)
    torch.testing.assert_close(kept.scores, layer.scores)


def test_byte_cache_is_bounded_by_bytes_and_least_recently_used_goes_first() -> None:
    cache = ByteCache(100, size_of=len)
    cache.get("a", lambda: b"x" * 40)
    cache.get("b", lambda: b"x" * 40)
    cache.get("a", lambda: b"never")  # a is now the most recent
    cache.get("c", lambda: b"x" * 40)  # 120 > 100: b goes
    assert "a" in cache and "c" in cache and "b" not in cache
    assert cache.nbytes == 80
    assert cache.get("huge", lambda: b"x" * 500) == b"x" * 500  # returned, never cached
    assert "huge" not in cache and cache.nbytes <= 100


def test_byte_cache_releases_what_only_ended_sessions_read() -> None:
    cache = ByteCache(1000, size_of=len)
    cache.get("mine", lambda: b"x" * 10, owner="s1")
    cache.get("shared", lambda: b"x" * 10, owner="s1")
    cache.get("shared", lambda: b"y", owner="s2")
    freed = cache.release(alive=lambda sid: sid == "s2")
    assert freed == 10 and "mine" not in cache and "shared" in cache
    assert cache.release(alive=lambda sid: False) == 10 and len(cache) == 0


def test_byte_cache_makes_one_copy_when_sessions_race() -> None:
    cache = ByteCache(1000, size_of=len)
    barrier = threading.Barrier(4)
    got = []

    def make() -> bytes:
        barrier.wait(timeout=10)  # all four miss together
        return bytes(8)

    threads = [
        threading.Thread(target=lambda i=i: got.append(cache.get("k", make, owner=str(i))))
        for i in range(4)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=20)
    assert len(got) == 4 and all(g is got[0] for g in got)  # everyone holds the cached copy
    assert cache.nbytes == 8


def test_head_change_on_the_overview_leaves_the_mosaic_unchanged() -> None:
    at = app(query={"view": "overview", "layers": "2"})
    before = [s for s in specs(at) if s["data"][0]["type"] == "image"]
    at.slider(key="head").set_value(3).run()
    assert not at.exception
    after = [s for s in specs(at) if s["data"][0]["type"] == "image"]
    assert len(before) == len(after) == 1
    assert before[0] == after[0]  # same message: the browser keeps it, nothing is resent


def test_the_csv_is_built_only_when_downloaded(monkeypatch) -> None:
    from attnviz.views import frames

    calls = []
    real = frames.matrix_frame
    monkeypatch.setattr(frames, "matrix_frame", lambda *a, **k: calls.append(1) or real(*a, **k))
    at = app(query={"view": "detail"})
    assert not at.exception
    assert at.get("download_button"), "the detail view offers the CSV"
    assert calls == []


@pytest.mark.parametrize(
    ("lang", "shown"),
    [("English", "Loading the weights of sentence"), ("中文", "正在加载 sentence")],
)
def test_pretrained_page_shows_progress_while_the_model_loads(monkeypatch, lang, shown) -> None:
    from attnviz.i18n import Message
    from attnviz.serve import warmup

    app("app_pages/pretrained.py")  # the model is loaded (and the loader has run)
    monkeypatch.setattr(warmup, "_done", threading.Event())  # as if still loading
    step = Message("load.weights", name="sentence-transformers/all-MiniLM-L6-v2")
    monkeypatch.setitem(warmup._state, "message", step)
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "attnviz" / "app.py"), default_timeout=60)
    at.query_params["lang"] = lang
    at.switch_page("app_pages/pretrained.py")
    at.run()
    assert not at.exception
    assert any(shown in str(i.value) for i in at.info), [i.value for i in at.info]
    assert not at.get("plotly_chart")


def test_warmup_loads_the_model_then_freezes_the_collector() -> None:
    code = (
        "import gc; from attnviz.serve import warmup; warmup.start(); m = warmup.bundled_model(); "
        "print(m.n_layers, gc.get_freeze_count() > 100_000)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.stdout.split() == ["6", "True"], out.stderr[-2000:]
    env_off = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ATTNVIZ_GC_FREEZE": "0"},
    )
    assert env_off.stdout.split() == ["6", "False"], env_off.stderr[-2000:]


def test_pinned_entries_outlive_their_sessions_but_not_the_byte_limit() -> None:
    cache = ByteCache(100, len)
    cache.get("landing", lambda: b"x" * 40, owner="warm-up session")
    assert cache.pin() == 1
    cache.get("student", lambda: b"y" * 40, owner="s1")
    assert cache.release(lambda session: False) == 40  # the student's entry goes, not the pinned
    assert "landing" in cache and "student" not in cache
    cache.get("big", lambda: b"z" * 90, owner="s2")  # LRU by bytes still evicts a pinned entry
    assert "landing" not in cache and "big" in cache


def test_serve_renders_the_pages_before_it_opens_and_pins_their_traces() -> None:
    """`make run` opens the server warm: the landing pages rendered once, their traces kept."""
    code = (
        "import gc\n"
        "from attnviz.ui import launch as serve\n"
        "from attnviz.ui.caching import trace_cache\n"
        "ok = serve.prime('attnviz/app.py')\n"
        "cache = trace_cache()\n"
        "freed = cache.release(lambda session: False)  # every session that read them has ended\n"
        "kinds = ('model', 'stack')  # what a cached request names: a loaded model or the stack\n"
        "keys = sorted(kinds[type(k.model).__name__ == 'StackConfig'] for k in cache._entries)\n"
        "print(ok, freed, ','.join(keys), gc.get_freeze_count() > 100_000)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.stdout.split()[-4:] == ["True", "0", "model,stack", "True"], out.stderr[-3000:]
    assert "attnviz: warm in" in out.stdout


@pytest.mark.parametrize(
    "var,value", [("ATTNVIZ_TRACE_WORKERS", "3"), ("ATTNVIZ_CACHE_BYTES", "5")]
)
def test_serving_knobs_are_read_from_the_environment(monkeypatch, var, value) -> None:
    from attnviz.engine.budget import from_env
    from attnviz.serve.settings import Serving

    monkeypatch.setenv(var, value)
    b = Serving(**from_env(Serving, {}))
    assert getattr(b, var.removeprefix("ATTNVIZ_").lower()) == int(value)


def test_downloads_kept_with_the_session_do_not_hold_the_whole_trace(monkeypatch) -> None:
    import gc
    import weakref

    from attnviz.ui import explorer

    captured = {}
    monkeypatch.setattr(
        explorer.st, "download_button", lambda label, data, **kw: captured.update({kw["key"]: data})
    )
    trace = trace_text("the cat sat on the mat", StackConfig(d_model=16, n_heads=2))
    explorer.export_json(trace)
    build = captured["json_trace"]
    assert json.loads(build())["tokens"] == trace.tokens  # works while the trace lives
    ref = weakref.ref(trace)
    del trace
    gc.collect()
    assert ref() is None  # the callable Streamlit keeps did not pin the trace
    assert "error" in json.loads(build())


def test_figures_built_without_validation_are_the_same_figures(monkeypatch) -> None:
    """The app skips plotly's validation when it builds a mosaic or a heatmap; what it sends must
    be what the validated build (the tests' mode) sends."""
    from attnviz.views import panels as views
    from attnviz.views.selection import Selection

    assert figure_spec._VALIDATE  # tests/conftest.py
    trace = trace_text("the cat sat on the mat", StackConfig(d_model=16, n_heads=4, n_layers=2))
    long_w = torch.softmax(torch.randn(300, 300), -1)  # [q, k]

    def build() -> list[dict]:
        figs = [
            views.overview_figure(trace, Selection()),
            *views.detail_figures(trace, Selection(layer=1, head=2, mark=(1, 2))),
            picture(long_w, "w"),
            draw_map(
                trace.layers[0].weights[0],
                Axis(trace.tokens),
                Axis(trace.tokens),
                Colour(),
                Marks(numbers=True),
            ),  # fmt: skip
        ]
        return [json.loads(f.to_json()) for f in figs]  # the same JSON, keys in any order

    validated = build()
    monkeypatch.setattr(figure_spec, "_VALIDATE", False)
    assert build() == validated


def test_the_class_server_neither_watches_files_nor_collects_after_every_run() -> None:
    """`make run` reads .streamlit/config.toml: with Streamlit's default file watcher every rerun
    took ~0.96 s instead of ~0.07 s (the watcher checks the modules it watches), and the full
    collection after every run cost ~8 ms of GIL a rerun (attnviz.ui.caching collects instead)."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"
    assert config["runner"]["postScriptGC"] is False
    assert "--server.fileWatcherType" not in (ROOT / "Makefile").read_text()  # not overridden


def test_uploads_are_capped_near_the_text_limit_and_the_boxes_say_it() -> None:
    """The upload box said "200MB per file" (Streamlit's default, held in memory) while
    a document may have 100,000 characters. The server's cap now fits the largest allowed text
    (4 bytes a character in UTF-8) and no more than 1 MB; the boxes state the limit."""
    import tomllib

    from attnviz.engine.budget import budget
    from tests.apphelpers import app

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    cap = config["server"]["maxUploadSize"] * 2**20
    assert 4 * budget().max_text_chars <= cap <= 2**20
    at = app("app_pages/pretrained.py")
    labels = [u.proto.label for u in at.get("file_uploader")]
    assert labels == [f"Upload a .txt or .md file of up to {budget().max_text_chars:,} characters "
                      "(UTF-8)"], labels  # fmt: skip
    at = app("app_pages/pretrained.py", query={"lang": "zh"})
    assert "最多 100,000 个字符" in at.get("file_uploader")[0].proto.label


def test_mosaic_images_take_the_known_palette_and_stay_lossless(monkeypatch) -> None:
    """The mosaic is built as indices into one palette (weight levels, white, the focus bars'
    grey, the X's grey, the selection's orange) and written as a palette PNG: each thumbnail
    decodes to its weights coloured as coloured() colours them, and every pixel to a known
    colour. Other images (a map) find their colours by one table lookup, not np.unique's sort."""
    import base64
    import io

    from PIL import Image

    from attnviz.views.colour import coloured

    seen = []
    real = images.png_data_uri
    monkeypatch.setattr(images, "png_data_uri", lambda img: seen.append(img) or real(img))
    w = torch.softmax(torch.randn(2, 3, 40, 40) * 3, -1)  # [layer, head, q, k]
    marked = images.mosaic(w, images.Tiles(selected=(1, 2), marked=((0, 1),)))
    focus = images.mosaic(w, images.Tiles(focus=5, gamma=0.5, selected=(0, 0)))
    assert not seen  # the mosaic never looks its colours up again
    known = images._known_palette()[0]
    for fig in (marked, focus):
        uri = fig.data[0].source
        im = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
        assert im.mode == "P"
        px = _png(uri).reshape(-1, 3).astype(np.uint32)
        assert np.isin((px[:, 0] << 16) | (px[:, 1] << 8) | px[:, 2], known).all()
    pixels = _png(marked.data[0].source)
    for layer, head in ((1, 0), (0, 2), (1, 1)):  # neither crossed out nor outlined
        y0, x0 = 4 + layer * 44, 4 + head * 44  # 40-pixel tiles, 4 apart
        tile = w[layer, head] / w[layer, head].max()
        np.testing.assert_array_equal(pixels[y0 : y0 + 40, x0 : x0 + 40], coloured(tile, 1.0))
    assert (pixels[:4] == 255).all()  # the gap above the first row: white
    fig = draw_map(w[0, 0], Axis(["k"] * 40), Axis(["q"] * 40), Colour(), Marks(values=False))
    (img,) = seen
    flat = img.reshape(-1, 3).astype(np.uint32)
    packed = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]
    colours, index = images._palette_index(packed)
    assert colours is known  # the fast path, not the fallback
    np.testing.assert_array_equal(colours[index], packed)
    np.testing.assert_array_equal(_png(fig.data[0].source), img)


def test_a_spec_sends_what_its_figure_sends_every_time() -> None:
    """spec.Spec: the JSON plotly.io.to_json makes of it (what st.plotly_chart sends) is the
    figure's, on every call (to_json pops trace uids in place), and figure() gives it back."""
    import plotly.io
    import plotly.tools

    trace = trace_text("the cat sat on the mat", StackConfig(d_model=16, n_heads=4, n_layers=2))
    for fig in (
        draw_map(
            trace.layers[0].weights[0],
            Axis(trace.tokens),
            Axis(trace.tokens),
            Colour(),
            Marks(),
            Frame("<b>w</b>"),
        ),  # fmt: skip
        images.mosaic(trace.weights(), images.Tiles(selected=(1, 1))),
    ):
        spec = figure_spec.Spec(fig)

        def sent(f) -> str:
            return plotly.io.to_json(
                plotly.tools.return_figure_from_figure_or_data(f, True), validate=False
            )

        assert sent(spec) == sent(spec) == sent(fig)
        assert json.loads(spec.figure().to_json()) == json.loads(fig.to_json())
        assert spec.nbytes > 0


def test_specs_made_straight_from_the_dicts_send_what_the_figures_send(monkeypatch) -> None:
    """spec.making_specs: the app's cached figures skip go.Figure and its deep copies; what
    st.plotly_chart sends of them must be what it sends of the figures (keys in any order)."""
    import plotly.io
    import plotly.tools
    import streamlit  # noqa: F401  (its template is the default one, as in the app)

    from attnviz.views import panels as views
    from attnviz.views.selection import Selection

    monkeypatch.setattr(figure_spec, "_VALIDATE", False)  # the app's mode
    trace = trace_text("the cat sat on the mat", StackConfig(d_model=16, n_heads=4, n_layers=2))
    long_w = torch.softmax(torch.randn(300, 300), -1)  # [q, k]
    logits = trace.layers[1].logits()[0]  # [q, k] with no -inf: mask one cell
    logits[0, 3] = float("-inf")

    zh = Selection(lang="zh")

    def build() -> list:
        return [
            views.overview_figure(trace, zh),
            views.overview_figure(trace, replace(zh, focus=2, shared=True)),
            *views.detail_figures(trace, replace(zh, layer=1, head=2, mark=(1, 2), scale="power")),
            picture(long_w, "<w>"),
            draw_map(logits, Axis(trace.tokens), Axis(trace.tokens), Colour(), Marks(numbers=True)),
        ]

    def sent(f) -> dict:
        return json.loads(
            plotly.io.to_json(plotly.tools.return_figure_from_figure_or_data(f, True), False)
        )

    plain = build()
    with figure_spec.making_specs():
        specs = build()
    assert all(isinstance(f, figure_spec.Spec) for f in specs)
    assert not any(isinstance(f, figure_spec.Spec) for f in build())  # only inside making_specs
    for fig, spec in zip(plain, specs, strict=True):
        assert sent(spec) == sent(spec) == sent(fig)
        assert sent(spec)["layout"]["template"] == sent(fig)["layout"]["template"] != {}
        assert abs(spec.nbytes - len(fig.to_json())) < 0.02 * spec.nbytes


def test_per_trace_keeps_a_few_of_a_kind_most_recent_first() -> None:
    from attnviz.serve import memos

    trace = trace_text("a b c", StackConfig(d_model=8, n_heads=2, n_layers=1))
    made = []

    def value(key):
        return memos.per_trace(trace, key, lambda: made.append(key) or key, keep=2)

    for key in [("maps", 1), ("maps", 2), ("maps", 1), ("maps", 3), ("mosaic",)]:
        value(key)
    assert made == [("maps", 1), ("maps", 2), ("maps", 3), ("mosaic",)]  # 1 was reused
    value(("maps", 2))  # the least recently used of its kind went when 3 came
    value(("maps", 1))
    assert made[-2:] == [("maps", 2), ("maps", 1)] and len(made) == 6


def test_traces_are_made_in_threads_that_stay_and_counted_for_the_collector(monkeypatch) -> None:
    """A forward in Streamlit's new thread per rerun paid for a new OpenMP team each time."""
    from attnviz.engine.request import TraceRequest
    from attnviz.serve import collector, tracing
    from attnviz.ui import caching

    config = StackConfig(d_model=16, n_heads=4, n_layers=2)
    where = []
    real = tracing.trace_text

    def spy(*args, **kwargs):
        where.append(threading.current_thread())
        return real(*args, **kwargs)

    counted = []
    monkeypatch.setattr(tracing, "trace_text", spy)
    monkeypatch.setattr(tracing, "count_made", counted.append)
    one = caching.cached_trace(TraceRequest(config, "one two"))
    caching.cached_trace(TraceRequest(config, "three four"))
    assert where[0] is not threading.current_thread()
    assert all(t.name.startswith("attnviz-trace") and t.is_alive() for t in where)
    assert len(counted) == 2 and counted[0] >= one.nbytes() > 0  # the full trace's bytes
    assert one.request == TraceRequest(config, "one two")  # the trace knows what it answers

    class Flag:  # stands in for the collector's event (its thread may be waiting on the real one)
        def set(self) -> None:
            counted.append("collect")

        def wait(self, timeout=None) -> bool:
            threading.Event().wait(0.05)
            return False

        def clear(self) -> None:
            pass

    monkeypatch.undo()
    monkeypatch.setattr(collector, "_made", Flag())
    monkeypatch.setattr(collector, "_made_bytes", [0])
    monkeypatch.setattr(collector, "COLLECT_BYTES", 100)
    collector.count_made(60)
    assert counted[-1] != "collect"
    collector.count_made(60)  # 120 bytes of traces made since the last collection: collect soon
    assert counted[-1] == "collect"

    def broken(*args, **kwargs):
        raise ValueError("bad input")

    monkeypatch.setattr(tracing, "trace_text", broken)
    with pytest.raises(ValueError, match="bad input"):
        caching.cached_trace(TraceRequest(config, "five six"))


def _blocked(batcher):
    """Occupy a one-thread batcher until the returned event is set, so that jobs queue."""
    from attnviz.serve.batcher import Batcher  # noqa: F401  (the type of `batcher`)

    go, started = threading.Event(), threading.Event()
    first = batcher.submit(None, None, lambda items: [started.set() or go.wait(10)])
    assert started.wait(10)
    return go, first


def test_waiting_jobs_of_one_group_run_as_one_call_in_arrival_order() -> None:
    from attnviz.serve.batcher import Batcher

    calls = []

    def run(items):
        calls.append(list(items))
        return [f"{x}!" for x in items]

    batcher = Batcher(1, 3, "test-batcher")
    go, first = _blocked(batcher)
    jobs = [batcher.submit("g", f"s{i}", run) for i in range(4)]
    other = batcher.submit("h", "t", run)
    alone = batcher.submit(None, "u", run)
    late = batcher.submit("g", "s4", run)
    assert batcher.waiting() == 7
    go.set()
    assert first.result(10) is True
    assert [j.result(10) for j in jobs] == ["s0!", "s1!", "s2!", "s3!"]
    assert (other.result(10), alone.result(10), late.result(10)) == ("t!", "u!", "s4!")
    # At most three a call; the group's jobs jump no other group's, and the rest go in order.
    assert calls == [["s0", "s1", "s2"], ["s3", "s4"], ["t"], ["u"]]
    assert all(t.name.startswith("test-batcher") and t.is_alive() for t in batcher.threads)


def test_a_batch_holds_at_most_its_weight_and_a_heavy_job_goes_alone() -> None:
    from attnviz.serve.batcher import Batcher

    calls = []

    def run(items):
        calls.append(list(items))
        return items

    batcher = Batcher(1, 8, "test-batcher", max_weight=7)
    go, _ = _blocked(batcher)
    jobs = [batcher.submit("g", x, run, w) for x, w in (("a", 3), ("big", 10), ("b", 3), ("c", 3))]
    go.set()
    assert [j.result(10) for j in jobs] == ["a", "big", "b", "c"]
    assert calls == [["a", "b"], ["big"], ["c"]]


def test_a_lingering_job_waits_for_its_group_until_its_batch_is_full_or_its_time_is_up() -> None:
    """With `linger`, a job that finds the worker free waits (from its submission) for others of
    its group: a batch that fills (by count or by weight) runs at once; one that does not, when
    its time is up; a job of no group and a linger of 0 never wait."""
    import time

    from attnviz.serve.batcher import Batcher

    calls, asked = [], []

    def run(items):
        calls.append((list(items), time.monotonic()))
        return items

    def linger(waiting: int) -> float:
        asked.append(waiting)
        return 0.4

    batcher = Batcher(1, 3, "test-batcher", max_weight=10, linger=linger)
    t0 = time.monotonic()
    first = batcher.submit("g", "a", run)
    time.sleep(0.05)
    second, third = batcher.submit("g", "b", run), batcher.submit("g", "c", run)
    assert [j.result(10) for j in (first, second, third)] == ["a", "b", "c"]
    assert calls[0][0] == ["a", "b", "c"] and calls[0][1] - t0 < 0.3  # full: no waiting on
    assert asked and max(asked) <= 3
    calls.clear()
    t0 = time.monotonic()
    assert batcher.submit("g", "d", run).result(10) == "d"
    assert 0.35 < calls[0][1] - t0 < 2  # alone: waited its 0.4 s, then ran
    calls.clear()
    t0 = time.monotonic()
    heavy = [batcher.submit("g", x, run, 6) for x in ("e", "f")]  # 6 + 6 > 10: the first is full
    assert [j.result(10) for j in heavy] == ["e", "f"]
    assert calls[0][0] == ["e"] and calls[0][1] - t0 < 0.3
    calls.clear()
    t0 = time.monotonic()
    assert batcher.submit(None, "g", run).result(10) == "g" and calls[0][1] - t0 < 0.3
    quick = Batcher(1, 3, "test-batcher", linger=lambda waiting: 0.0)
    t0 = time.monotonic()
    assert quick.submit("g", "h", run).result(10) == "h" and time.monotonic() - t0 < 0.3


def test_the_trace_workers_linger_only_while_other_pages_run(monkeypatch) -> None:
    """A sentence waits for others only while other script runs are in flight (a researcher
    alone never waits), at most as long as the last forward took and at most LINGER_MAX_S."""
    from attnviz.serve import tracing

    monkeypatch.setattr(tracing, "_last_forward_s", [0.03])
    monkeypatch.setattr(tracing, "script_runs", lambda: 1)
    assert tracing.linger(1) == 0.0  # the one page running is the one waiting
    monkeypatch.setattr(tracing, "script_runs", lambda: 5)
    assert tracing.linger(1) == 0.03 and tracing.linger(5) == 0.0
    monkeypatch.setattr(tracing, "_last_forward_s", [3.0])
    assert tracing.linger(2) == tracing.LINGER_MAX_S


def test_a_failing_batch_is_run_again_one_job_at_a_time() -> None:
    from attnviz.serve.batcher import Batcher

    calls = []

    def run(items):
        calls.append(list(items))
        if "bad" in items:
            raise ValueError("bad input")
        return [x.upper() for x in items]

    batcher = Batcher(1, 8, "test-batcher")
    go, _ = _blocked(batcher)
    jobs = [batcher.submit("g", x, run) for x in ("a", "bad", "c")]
    go.set()
    assert jobs[0].result(10) == "A" and jobs[2].result(10) == "C"
    with pytest.raises(ValueError, match="bad input"):
        jobs[1].result(10)
    assert calls == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]
    with pytest.raises(ValueError, match="at least 1"):
        Batcher(0, 8, "test-batcher")


def test_sentences_typed_at_once_share_a_forward_and_get_their_own_traces(monkeypatch) -> None:
    """The Pretrained page's traces: sessions waiting at the same moment get one trace_batch
    call, and each trace is the one the session would have got alone."""
    from attnviz.engine.hooked import load_model, may_share, prepare, trace_model
    from attnviz.serve import tracing
    from attnviz.ui import models

    model = load_model()
    texts = ["the cat sat on the mat", "a much longer sentence than the first one is", "short"]
    batcher = tracing.Batcher(1, tracing.BATCH_MAX, "test-batcher")
    monkeypatch.setattr(tracing, "pool", lambda: batcher)
    seen = []
    real = tracing.run_model
    monkeypatch.setattr(tracing, "run_model", lambda m, items: seen.append(items) or real(m, items))
    go, _ = _blocked(batcher)
    out = {}
    threads = [
        threading.Thread(
            target=lambda t=t: out.update({t: models.model_trace(model, models.request(model, t))})
        )
        for t in texts
    ]
    for thread in threads:
        thread.start()
    while batcher.waiting() < len(texts):
        threading.Event().wait(0.01)
    go.set()
    for thread in threads:
        thread.join(30)
    assert len(seen) == 1 and sorted(i.request.text for i in seen[0]) == sorted(texts)
    for text in texts:
        alone = trace_model(model, text)
        assert out[text].tokens == alone.tokens and out[text].request.text == text
        for a, b in zip(out[text].layers, alone.layers, strict=True):
            torch.testing.assert_close(a.weights, b.weights, atol=5e-5, rtol=1e-4)
    # Masked tokens, a second sentence or a long input are made alone.
    models.model_trace(model, models.request(model, texts[0], mask_tokens=(1,)))
    models.model_trace(model, models.request(model, texts[0], "and a second sentence"))
    long = models.model_trace(model, models.request(model, "word " * 300))
    assert len(seen) == 4 and all(len(items) == 1 for items in seen[1:])
    assert len(long.tokens) == 302
    assert 2 * prepare(model, models.request(model, "word " * 300)).n_bytes > tracing.BATCH_BYTES
    # A model whose padding would move its inputs' positions does not share forwards.
    assert may_share(model, prepare(model, models.request(model, texts[0])))
    monkeypatch.setattr(model.call_tokenizer, "padding_side", "left")
    assert not may_share(model, prepare(model, models.request(model, texts[0])))


def test_a_sentence_is_tokenized_once_per_trace() -> None:
    """From the page's request to the forward, the tokenizer reads a sentence once: the request
    is weighed and grouped by the tokens the forward then uses."""
    from attnviz.engine.hooked import load_model
    from attnviz.ui import models

    model = load_model()
    calls = []

    class Counting:
        def __init__(self, tok) -> None:
            self.tok = tok

        def __call__(self, *args, **kwargs):
            calls.append(args[0])
            return self.tok(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.tok, name)

    real = model.call_tokenizer
    object.__setattr__(model, "call_tokenizer", Counting(real))  # a frozen dataclass
    try:
        for text in ("a sentence seen once, by one tokenizer call", "and a second one"):
            trace = models.model_trace(model, models.request(model, text, ablate=[(0, 1)]))
            assert calls == [[text]] and trace.request.text == text
            calls.clear()
    finally:
        object.__setattr__(model, "call_tokenizer", real)


def test_a_forward_uses_every_core_alone_and_one_while_others_run() -> None:
    """The trace workers' thread count: all cores for a student alone, one core while other runs
    are in flight or jobs wait, and all again only after ALONE_S of quiet (changing the count
    costs OpenMP a new team, so a class does not flip it on every forward)."""
    from attnviz.serve.cores import ALONE_S, Cores

    cores = Cores(4)
    assert cores.pick(callers=1, waiting=0, runs=1, now=0.0) == 4  # one student, alone
    assert cores.pick(callers=3, waiting=0, runs=3, now=0.5) == 4  # one batch, nothing else
    assert cores.pick(callers=1, waiting=0, runs=3, now=1.0) == 1  # two other runs going
    assert cores.pick(callers=1, waiting=0, runs=1, now=1.5) == 1  # quiet, but only just
    assert cores.pick(callers=1, waiting=0, runs=1, now=1.0 + ALONE_S + 0.1) == 4
    assert cores.pick(callers=1, waiting=2, runs=1, now=10.0) == 1  # jobs queued behind it
    assert cores.pick(callers=2, waiting=0, runs=5, now=10.0 + ALONE_S) == 1  # other runs going
    assert cores.pick(callers=2, waiting=0, runs=2, now=20.0) == 4


def test_each_worker_thread_keeps_its_own_thread_count(monkeypatch) -> None:
    """With ATTNVIZ_TRACE_WORKERS=2, one worker turning to one thread does not make the other
    believe it did too: OpenMP's count is per thread."""
    from attnviz.serve.cores import Cores

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the test's own torch unchanged
    cores, seen = Cores(2), {}

    def worker(name):
        seen[name, "before"] = cores.now
        cores.use(1, 3)  # jobs waiting: busy
        seen[name, "after"] = cores.now

    for name in ("a", "b"):
        thread = threading.Thread(target=worker, args=(name,))
        thread.start()
        thread.join(10)
    assert seen == {("a", "before"): 2, ("a", "after"): 1, ("b", "before"): 2, ("b", "after"): 1}
    assert cores.now == 2  # this thread never ran a forward


def test_script_runs_counts_streamlit_script_threads() -> None:
    """cores.script_runs() finds Streamlit's run threads by name: this checks the name."""
    from streamlit.testing.v1 import AppTest

    from attnviz.serve import cores

    def script():
        import threading

        import streamlit as st

        from attnviz.serve import cores

        st.markdown(f"{threading.current_thread().name} {cores.script_runs()}")

    at = AppTest.from_function(script).run(timeout=30)
    assert not at.exception
    assert at.markdown[0].value.split() == [cores.SCRIPT_THREAD, "1"]
    assert cores.script_runs() == 0


def test_a_request_finds_any_live_copy_of_its_model() -> None:
    # The warm-up's copy and the model cache's share a key; the cache's copy, registered last,
    # was evicted and the head-logits view said the page's own model was "no longer loaded".
    import gc

    from attnviz.engine.request import TraceRequest
    from attnviz.serve import tracing

    class Copy:
        key = ("test-model-a-request-finds", "cpu", "float32")

    warm, cached = Copy(), Copy()
    tracing.register(warm)
    tracing.register(cached)
    request = TraceRequest(model=Copy.key, text="x")
    assert tracing.model_for(request) is cached
    del cached
    gc.collect()
    assert tracing.model_for(request) is warm
    del warm
    gc.collect()
    with pytest.raises(LookupError):
        tracing.model_for(request)


def test_the_servers_websocket_deflates_at_level_1_and_still_round_trips() -> None:
    """make run's launcher has uvicorn's websockets compress at zlib level 1 (a page is mostly an
    already compressed PNG): the extension it negotiates carries the level, keeps uvicorn's own
    settings, and what it compresses decompresses to the same bytes. Patching twice wraps once."""
    import base64
    import os
    import zlib

    from uvicorn.protocols.websockets import websockets_sansio_impl as impl

    from attnviz.ui import launch

    before = impl.ServerPerMessageDeflateFactory
    try:
        assert launch.fast_websocket_deflate() and launch.fast_websocket_deflate()
        factory = impl.ServerPerMessageDeflateFactory(
            server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5}
        )
        assert factory.compress_settings == {"memLevel": 5, "level": 1}
        assert impl.ServerPerMessageDeflateFactory._attnviz_made is before.__dict__.get(
            "_attnviz_made", before
        )
    finally:
        impl.ServerPerMessageDeflateFactory = before
    page = b'{"source":"data:image/png;base64,' + base64.b64encode(os.urandom(50_000)) + b'"}'
    fast = zlib.compressobj(wbits=-12, memLevel=5, level=1)
    sent = fast.compress(page) + fast.flush(zlib.Z_SYNC_FLUSH)
    assert zlib.decompressobj(wbits=-12).decompress(sent) == page
    default = zlib.compressobj(wbits=-12, memLevel=5)
    assert len(sent) < 1.05 * len(default.compress(page) + default.flush(zlib.Z_SYNC_FLUSH))
