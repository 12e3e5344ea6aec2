"""Hostile input through the engine and through every page of the app (tests/hostile_corpus.py).

Engine: every public entry point either returns a result whose numbers are finite (weights rows sum
to 1, masked weights exactly 0) or raises ValueError/TypeError with a message, raised by attnviz
itself (not a library error passed through). App: every page found in app.py's navigation, with
hostile texts, model names and links: no exception shown, no user markup raw in any Markdown body,
label or figure string, no "nan" shown as a number.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import traceback
from pathlib import Path

import pytest
import torch

from attnviz import StackConfig, trace_text
from attnviz.engine.trace import Trace
from tests import hostile_corpus as corpus
from tests.apphelpers import app, pages, small_atlas_probes

SENT = "The cat sat on the mat."
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_ESCAPED = re.compile(r"\\.")


# ---- checks shared with tests/test_hardening.py --------------------------------------------------


def _strings(message, names=("body", "label", "help", "caption", "options")) -> list[str]:
    """String fields of a protobuf message (and its sub-messages) with one of these names."""
    out = []
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE:
            items = value if field.is_repeated else [value]
            for item in items:
                out += _strings(item, names)
        elif field.name in names and isinstance(value, str):
            out.append(value)
        elif field.name in names and field.is_repeated:
            out += [v for v in value if isinstance(v, str)]
    return out


def _nodes(node):
    yield node
    children = getattr(node, "children", None)
    if isinstance(children, dict):
        for child in children.values():
            yield from _nodes(child)


def markdown_texts(at) -> list[str]:
    """Everything on the page Streamlit renders as Markdown: bodies of markdown, captions, titles,
    alerts, and the labels of widgets, expanders and status boxes (radio options too)."""
    out = []
    for node in _nodes(at._tree):
        proto = getattr(node, "proto", None)
        if proto is not None and hasattr(proto, "ListFields"):
            if getattr(node, "type", "") == "plotly_chart":
                continue  # figures are checked as HTML strings, see figure_strings
            out += _strings(proto)
    return out


def figure_strings(at) -> list[str]:
    """Every string inside every Plotly figure on the page (titles, ticks, hover templates...)."""
    out = []

    def walk(x):
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            if "bdata" not in x:
                for v in x.values():
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for chart in at.get("plotly_chart"):
        walk(json.loads(chart.proto.spec))
    return out


def raw_markup(texts: list[str], markers: list[str]) -> list[tuple[str, str]]:
    """(marker, text) for each marker found verbatim in a text outside its code spans and not
    backslash-escaped (Markdown shows an escaped character as itself)."""
    found = []
    for text in texts:
        bare = _ESCAPED.sub("", _CODE_SPAN.sub("", text))
        found += [(m, text[:200]) for m in markers if m in bare]
    return found


def assert_page_is_clean(at, where: str) -> None:
    assert not at.exception, f"{where}: {at.exception}"
    bodies = markdown_texts(at)
    assert raw_markup(bodies, corpus.MARKDOWN_MARKERS + corpus.HTML_MARKERS) == [], where
    assert raw_markup(figure_strings(at), corpus.HTML_MARKERS) == [], where
    for metric in at.get("metric"):
        assert "nan" not in str(metric.value).lower(), f"{where}: metric {metric.label}"


def engine_call(fn, *args, **kwargs):
    """Call an entry point: a checked result, or None after a ValueError/TypeError from attnviz."""
    try:
        out = fn(*args, **kwargs)
    except (ValueError, TypeError) as err:
        assert str(err).strip(), f"{type(err).__name__} without a message"
        last = traceback.extract_tb(err.__traceback__)[-1]
        assert "/attnviz/" in last.filename.replace("\\", "/"), (
            f"{type(err).__name__} came from {last.filename}:{last.lineno}, not the engine: {err}"
        )
        return None
    except Exception as err:  # noqa: BLE001 - the point: nothing else may escape
        pytest.fail(f"{fn.__name__} raised {type(err).__name__}: {err}")
    check_numbers(out)
    return out


MAY_BE_MINUS_INF = ("scaled",)  # the walkthrough's masked logits: -inf by design, shown as such


def finite_everywhere(value, name: str = "result") -> None:
    """No NaN and no inf in any tensor or float of a result (dataclasses, lists, dicts walked)."""
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point:
            bad = torch.isnan(value) | torch.isinf(value)
            if name in MAY_BE_MINUS_INF:
                bad = torch.isnan(value) | (value == float("inf"))
            assert not bad.any(), f"{name} has NaN or inf"
    elif isinstance(value, float):
        assert math.isfinite(value), f"{name}={value}"
    elif isinstance(value, dict):
        for k, v in value.items():
            finite_everywhere(v, str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            finite_everywhere(v, name)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            finite_everywhere(getattr(value, f.name), f.name)


def check_numbers(out) -> None:
    finite_everywhere(out)
    traces = out if isinstance(out, list) else [out]
    for trace in traces:
        if not isinstance(trace, Trace):
            continue
        for layer in trace.layers:
            for name in ("q", "k", "v", "scores", "weights", "z", "output"):
                assert torch.isfinite(getattr(layer, name)).all(), name
            w = layer.weights  # [head, q, k]
            if layer.mask is not None:
                assert (w.masked_select(~layer.mask) == 0).all()  # masked: exactly 0
                live = layer.mask.any(-1)  # [q] rows with some key to attend to
            else:
                live = torch.ones(w.shape[1], dtype=torch.bool)
            sums = w.sum(-1)[:, live]  # [head, live q]
            torch.testing.assert_close(sums, torch.ones_like(sums))


# ---- the engine ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    from attnviz.engine.hooked import load_model

    return load_model(device="cpu")


def test_the_corpus_has_at_least_100_cases() -> None:
    assert corpus.count() >= 100, corpus.count()


@pytest.mark.parametrize(
    "text", corpus.TEXTS + corpus.NOT_TEXT, ids=range(len(corpus.TEXTS + corpus.NOT_TEXT))
)
def test_texts_through_the_toy_stack_and_lessons(text) -> None:
    from attnviz.lessons.positions import order_blindness
    from attnviz.lessons.sharing import sharing_check
    from attnviz.lessons.walkthrough import walkthrough

    small = StackConfig(d_model=16, n_heads=2, n_layers=2, causal=True)
    engine_call(trace_text, text, small)
    engine_call(trace_text, SENT, small, text_pair=text)
    engine_call(walkthrough, text)
    engine_call(sharing_check, text, StackConfig(d_model=16, n_heads=4, n_kv_heads=2))
    engine_call(order_blindness, text, text, small)


@pytest.mark.parametrize(
    "text", corpus.TEXTS + corpus.NOT_TEXT, ids=range(len(corpus.TEXTS + corpus.NOT_TEXT))
)
def test_texts_through_the_pretrained_model(minilm, text) -> None:
    from attnviz.engine.hooked import trace_batch, trace_model
    from attnviz.engine.request import Knobs, TraceRequest

    def batch_of(model, texts, max_length):
        knobs = Knobs.checked()
        return trace_batch(
            model, [TraceRequest(model.key, t, None, knobs, max_length) for t in texts]
        )

    engine_call(trace_model, minilm, text, max_length=64)
    engine_call(trace_model, minilm, SENT, text_pair=text, max_length=64)
    engine_call(batch_of, minilm, [SENT, text], max_length=32)


@pytest.mark.parametrize("name", corpus.MODEL_NAMES + corpus.NOT_NAMES)
def test_model_names_and_paths(name, monkeypatch) -> None:
    from attnviz.engine.hooked import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be downloaded
    model = engine_call(load_model, name, device="cpu")
    assert model is None, f"{name!r} loaded a model"


def test_model_errors_name_no_resolved_folder(monkeypatch) -> None:
    from attnviz.engine.hooked import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("~", "../../../../etc", "/tmp"):
        with pytest.raises(ValueError) as err:
            load_model(name)
        resolved = str(Path(name).expanduser().resolve())
        assert resolved not in str(err.value).replace(repr(name), "")  # the name as typed only


@pytest.mark.parametrize("kwargs", corpus.CONFIGS, ids=[str(c)[:40] for c in corpus.CONFIGS])
def test_configs(kwargs) -> None:
    config = engine_call(StackConfig, **kwargs)
    if config is not None:
        engine_call(trace_text, SENT, config)


@pytest.mark.parametrize("kwargs", corpus.KNOBS, ids=[str(k)[:40] for k in corpus.KNOBS])
def test_knobs(minilm, kwargs) -> None:
    from attnviz.engine.hooked import trace_model

    kwargs = {"text_pair": None, **kwargs}
    engine_call(trace_model, minilm, SENT, **kwargs)


def _lesson_calls() -> list:
    from attnviz.lessons import convolution, costs
    from attnviz.lessons import scaling as lessons
    from attnviz.lessons.norms import norm_example
    from attnviz.lessons.sharing import comparison, kv_head_of
    from attnviz.lessons.walkthrough import walkthrough

    inf, nan = math.inf, math.nan
    return [
        (convolution.quadratic_position_scores, (15, 2, inf)),
        (convolution.quadratic_position_scores, (15, nan, 2.0)),
        (convolution.quadratic_position_scores, (10**9, 0, 1.0)),
        (convolution.quadratic_position_scores, (15, 2, -1.0)),
        (convolution.quadratic_position_scores, (15, 2, True)),
        (convolution.quadratic_position_scores, (15, 2, 1e300)),
        (convolution.kernel_from_heads, ((7, 7), nan)),
        (convolution.kernel_from_heads, ((10**6, 10**6), 1.0)),
        (convolution.kernel_from_heads, ((7, 7), 9999.0)),
        (lessons.variance_sweep, ((10**9,),)),
        (lessons.variance_sweep, ((64,), 10**9)),
        (lessons.variance_sweep, ((1.5,),)),
        (lessons.saturation_sweep, ((64,), 10**6)),
        (norm_example, (10**6,)),
        (norm_example, (2, 5, 8, 1.5)),
        (costs.kv_cache_bytes, (2, 8, 64, 10, 1, inf)),
        (costs.attention_params, (1.5, 2)),
        (costs.flops_attention, (10**12, 10**12, 64, 8, 8)),
        (kv_head_of, (8, 3)),
        (kv_head_of, (True, 1)),
        (comparison, (StackConfig(), -1)),
        (comparison, ("not a config",)),
        (walkthrough, ("x", 0)),
        (walkthrough, ("x", 10**6)),
        (walkthrough, ("x", 4, 0, True, False, 1.5)),
    ]


@pytest.mark.parametrize("index", range(25))
def test_lesson_functions_with_hostile_arguments(index: int) -> None:
    fn, args = _lesson_calls()[index]
    engine_call(fn, *args)


# ---- the app -------------------------------------------------------------------------------------

APP_TEXTS = [
    t
    for t in corpus.SCRIPTS[1:6]
    + corpus.CONTROL[:3]
    + ["replacement \ufffd char"]  # lone surrogates cannot travel as UTF-8: browsers send U+FFFD
    + [corpus.SIZES[2], corpus.SIZES[6]]
    + corpus.MARKUP
    + corpus.EMPTY[:1]
]


@pytest.mark.slow  # the Head atlas measures its heads again for each hostile text
@pytest.mark.parametrize("page", pages())
def test_every_page_with_hostile_texts(page: str, monkeypatch) -> None:
    small_atlas_probes(monkeypatch)  # each hostile text is measured, with two probes, not eleven
    # Generate's prompt is what is hostile here, not the run's length: one new token a run (a real
    # LLM makes 16 by default, 1.9 s each time on SmolLM2 here).
    monkeypatch.setattr("attnviz.ui.generate.MAX_NEW_TOKENS", 1)
    at = app(page)
    assert_page_is_clean(at, page)
    if any(t.key == "st_own" for t in at.toggle):  # the step page reads the text only when asked
        at.toggle(key="st_own").set_value(True).run()
    models = ("model", "at_model", "g_model")  # model names: test_model_box_with_hostile_names
    areas = {w.key for w in at.text_area}
    every = [w for w in list(at.text_input) + list(at.text_area) if w.key not in models]
    assert {"text", "pair"} <= {w.key for w in every}  # the shared sidebar is on every page
    # a page that reads its own text greys the sidebar's out (Generate): a user cannot type there
    boxes = [w.key for w in every if not w.disabled]
    for i, text in enumerate(APP_TEXTS):
        for key in boxes:
            widget = at.text_area(key=key) if key in areas else at.text_input(key=key)
            # The pair gets the hostile text on every other run, an ordinary one otherwise.
            value = text if key != "pair" or i % 2 else ("It was tired." if i % 4 else "")
            widget.set_value(value)
        at.run()
        assert_page_is_clean(at, f"{page} with text #{i} {text[:30]!r}")


MODEL_BOXES = [("app_pages/pretrained.py", "model"), ("app_pages/generate.py", "g_model")]


@pytest.mark.parametrize(("page", "key"), MODEL_BOXES)
def test_model_box_with_hostile_names(page: str, key: str) -> None:
    at = app(page)
    for name in corpus.MODEL_NAMES:
        if re.search("[\ud800-\udfff]", name):
            continue  # cannot travel as UTF-8 (the engine test covers it)
        at.text_input(key=key).set_value(name).run()
        assert_page_is_clean(at, f"model {name[:30]!r}")
        assert at.error or not name.strip(), f"{name[:30]!r} gave no message"
        home = str(Path("~").expanduser())
        assert all(home not in e.value for e in at.error) or name.startswith(home)


URL_IDS = [f"{page}-{i}" for i, (page, _) in enumerate(corpus.URLS)]


@pytest.mark.parametrize(("page", "query"), corpus.URLS, ids=URL_IDS)
def test_links_with_hostile_values(page: str, query: dict) -> None:
    path = next(p for p in pages() if Path(p).stem == page)
    at = app(path, query)
    assert_page_is_clean(at, f"{page}?{query}")
