"""Hostile and careless input, one section per kind (NaN instead of an answer, wrong exception
types, devices that cannot trace, resource exhaustion, long pairs, values silently accepted,
misleading messages, the model box), plus the budget and public mode.

Each test failed before its fix (commit 334133f, where they were named test_defect_N_*).
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch

from attnviz import StackConfig, trace_text
from attnviz.i18n import translate
from tests.apphelpers import app, heatmap_specs, specs

SENT = "The animal didn't cross the street because it was too tired."
PRETRAINED = "app_pages/pretrained.py"


@pytest.fixture(scope="module")
def minilm():
    from attnviz.engine.hooked import load_model

    return load_model(device="cpu")


def _finite(trace) -> bool:
    return all(
        bool(torch.isfinite(t).all())
        for layer in trace.layers
        for t in (layer.weights, layer.z, layer.output, layer.scores)
    )


# 1. NaN instead of an answer ----------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1e-40, 5e-324, 1e-37, 1e-4])
def test_tiny_temperature_is_refused_by_the_stack(temperature: float) -> None:
    for use_scale in (True, False):
        with pytest.raises(ValueError, match=r"temperature=.*between 0\.001 and 1000"):
            trace_text(SENT, StackConfig(temperature=temperature, use_scale=use_scale))


@pytest.mark.parametrize(
    ("temperature", "use_scale"), [(1e-40, True), (5e-324, True), (1e-37, False)]
)
def test_tiny_temperature_is_refused_by_trace_model(minilm, temperature, use_scale):
    from attnviz.engine.hooked import trace_model

    with pytest.raises(ValueError, match=r"between 0\.001 and 1000"):
        trace_model(minilm, SENT, temperature=temperature, use_scale=use_scale)


def test_smallest_allowed_temperature_gives_finite_one_hot_rows(minilm) -> None:
    from attnviz.engine.hooked import trace_model

    for trace in (
        trace_text(SENT, StackConfig(temperature=1e-3, use_scale=False)),
        trace_model(minilm, SENT, temperature=1e-3, use_scale=False),
    ):
        assert _finite(trace)
        w = trace.layers[0].weights  # [head, q, k]
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
        assert float(w.amax(-1).mean()) > 0.9  # the limit: (nearly) one-hot rows


# 2. Wrong exception type --------------------------------------------------------------------------


def test_wrong_types_raise_type_error(minilm) -> None:
    from attnviz.engine.hooked import trace_model

    with pytest.raises(TypeError, match="text_pair must be a string"):
        trace_text(SENT, text_pair=123)
    with pytest.raises(TypeError, match="text_pair must be a string"):
        trace_model(minilm, SENT, text_pair=123)
    with pytest.raises(TypeError, match="text must be a string"):
        trace_model(minilm, 123)


def test_lone_surrogates_and_long_names_raise_value_error(minilm) -> None:
    from attnviz.engine.hooked import load_model, trace_model

    for text in ("abc\ud800def", "\udfff"):
        with pytest.raises(ValueError, match="surrogate"):
            trace_model(minilm, text)
        with pytest.raises(ValueError, match="surrogate"):
            trace_text(text)
    with pytest.raises(ValueError, match="at most 256"):
        load_model("a" * 500)


# 3. A device that cannot trace --------------------------------------------------------------------


def test_meta_device_is_refused() -> None:
    from attnviz.engine.hooked import load_model

    for device in ("meta", torch.device("meta"), "xla", "cpu:banana"):
        with pytest.raises((ValueError, TypeError), match="device"):
            load_model(device=device)


# 4. Resource exhaustion ---------------------------------------------------------------------------


def test_huge_config_is_refused_with_its_size() -> None:
    with pytest.raises(ValueError, match=r"16\.0 GiB of weights.*allows 1\.0 GiB"):
        StackConfig(d_model=1024, n_heads=256, d_head=4096)


def test_link_config_is_refused_before_any_weight_is_built() -> None:
    from attnviz.engine import stack

    stack._cached_weights.cache_clear()
    with pytest.raises(ValueError, match=r"3\.2 GiB"):
        StackConfig(d_model=1024, d_head=1024, n_heads=32, n_kv_heads=32, n_layers=6, ffn=True)
    assert stack._cached_weights.cache_info().currsize == 0


def test_trace_over_the_budget_is_refused_with_its_size() -> None:
    # One layer fits by weights (512 MiB) but not as a 512-token trace with two layers.
    config = StackConfig(d_model=1024, d_head=1024, n_heads=32, n_layers=2)
    with pytest.raises(ValueError, match=r"(needs [\d.]+ [GM]iB|GFLOP)"):
        trace_text("word " * 600, config)


def test_the_link_gets_a_message_and_no_big_trace() -> None:
    query = {
        "d_model": "1024",
        "dk_auto": "false",
        "d_head": "1024",
        "heads": "32",
        "kv": "32",
        "layers": "6",
        "ffn": "true",
        "text": "word " * 600,
    }
    at = app(query=query)
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "GiB" in errors and "allows" in errors
    assert heatmap_specs(at) == []  # nothing computed for the link
    # The controls were clamped to settings that fit: the next change runs them.
    at.toggle(key="scale").set_value(False).run()
    assert not at.exception and not at.error
    heads = at.select_slider(key="heads").value
    # one map a head: at these lengths a picture (several maps of numbers would be megabytes),
    # all of a layer's pictures in one chart (views/grid.py)
    drawn = [d for s in specs(at) for d in s["data"] if d["type"] in ("heatmap", "image")]
    assert heads < 32 and len(drawn) == heads


def test_estimates_match_what_the_stack_allocates() -> None:
    from attnviz.engine.budget import stack_trace_bytes, stack_weight_bytes, stack_work

    config = StackConfig(d_model=64, n_heads=8, n_kv_heads=2, n_layers=3, ffn=True)
    from attnviz.engine.stack import build_weights

    weights = build_weights(config)
    real = sum(
        t.numel() * t.element_size()
        for w in weights
        for t in (w.w_q, w.w_k, w.w_v, w.w_o, w.w_1, w.w_2)
    )
    assert stack_weight_bytes(config) == real
    trace = trace_text("one two three four five", config)
    kept = sum(
        t.numel() * t.element_size()
        for layer in trace.layers
        for t in (layer.q, layer.k, layer.v, layer.scores, layer.weights, layer.z, layer.output)
    ) + sum(layer.x.numel() * 4 for layer in trace.layers)
    estimate = stack_trace_bytes(config, 5, 5)
    assert kept <= estimate <= 2 * kept + 64 * 1024  # kept tensors plus one layer's temporaries
    # q·k and weights @ v: 4 h n² d_head of the work
    assert stack_work(config, 5, 5) > 4 * 8 * 25 * 8 * 3


def test_budget_reads_environment_overrides(monkeypatch) -> None:
    from attnviz.engine.budget import budget

    budget.cache_clear()
    try:
        monkeypatch.setenv("ATTNVIZ_MAX_WEIGHT_BYTES", str(2**20))
        budget.cache_clear()
        with pytest.raises(ValueError, match=r"allows 1\.0 MiB"):
            StackConfig(d_model=512, n_heads=4)
        monkeypatch.setenv("ATTNVIZ_MAX_TEXT_CHARS", "10")
        budget.cache_clear()
        with pytest.raises(ValueError, match="at most 10"):
            trace_text("a sentence with more than ten characters")
    finally:
        monkeypatch.undo()
        budget.cache_clear()


# 5. Long pairs ------------------------------------------------------------------------------------


class _Recorder:
    """A tokenizer that remembers the longest text it was asked to tokenize."""

    def __init__(self, inner) -> None:
        self.inner, self.longest = inner, 0

    def __call__(self, texts, pairs=None, **kwargs):
        for t in list(texts) + list(pairs or []):
            self.longest = max(self.longest, len(t or ""))
        return self.inner(texts, pairs, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_long_pairs_are_cut_before_tokenizing(minilm) -> None:
    from attnviz.engine.hooked import trace_model

    recorder = _Recorder(minilm.call_tokenizer)
    model = dataclasses.replace(minilm, call_tokenizer=recorder)
    trace = trace_model(model, "word " * 1200, text_pair="word " * 1200, max_length=5)
    assert trace.truncated and len(trace.tokens) == 5
    assert recorder.longest <= 4 * 6 * len("word ")  # 4 x (limit + 1) words, not 1200
    # The cut changes nothing below the limit: the same tokens as the untruncated call's first 5.
    full = trace_model(minilm, "word " * 10, text_pair="word " * 10, max_length=5)
    assert full.tokens == trace.tokens


# 6. Silently accepted -----------------------------------------------------------------------------


def test_stack_refuses_inf_and_bool_temperature() -> None:
    with pytest.raises(ValueError, match="finite"):
        StackConfig(temperature=math.inf)
    with pytest.raises(TypeError, match="number"):
        StackConfig(temperature=True)
    with pytest.raises(TypeError, match="True or False"):
        StackConfig(use_scale=1)


def test_trace_model_refuses_fractional_knobs(minilm) -> None:
    from attnviz.engine.hooked import trace_model

    with pytest.raises(ValueError, match="finite"):
        trace_model(minilm, SENT, temperature=math.inf)
    with pytest.raises(TypeError, match="number"):
        trace_model(minilm, SENT, temperature=True)
    with pytest.raises(TypeError, match="ablate layer"):
        trace_model(minilm, SENT, ablate=[(0.5, 1.7)])
    with pytest.raises(TypeError, match="mask_tokens position"):
        trace_model(minilm, SENT, mask_tokens=[0.5])
    with pytest.raises(TypeError, match="max_length"):
        trace_model(minilm, SENT, max_length=4.7)


# 7. Misleading messages ---------------------------------------------------------------------------


def test_playground_names_the_sentence_that_was_cut() -> None:
    at = app()
    at.text_input(key="pair").set_value("word " * 20_000).run()  # 100k characters
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "second sentence has 20000 tokens" in warnings
    assert "first sentence" not in warnings


def test_pretrained_page_says_both_sentences_count_together() -> None:
    at = app(PRETRAINED, {"text": "word " * 600})
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "has 602 tokens (both sentences together" in warnings and "at most 512" in warnings


def test_d_ff_is_not_blamed_when_it_was_never_used() -> None:
    assert StackConfig(d_model=4096).d_model == 4096  # no FFN: d_ff plays no part
    with pytest.raises(ValueError, match=r"the default, 4 \* d_model=4096"):
        StackConfig(d_model=4096, ffn=True)


def test_empty_model_name_is_refused_not_the_current_folder() -> None:
    from attnviz.engine.hooked import load_model

    with pytest.raises(ValueError, match="name is empty: pass None"):
        load_model("")


# 8. The model box ---------------------------------------------------------------------------------


def _bodies(at) -> list[str]:
    """Every Markdown body and label on the page (errors, status label, captions...)."""
    from tests.test_hostile import markdown_texts

    return markdown_texts(at)


@pytest.mark.parametrize("name", ["../../../../etc", "/tmp", "~"])
def test_folders_are_not_listed_and_home_is_not_shown(name: str) -> None:
    at = app(PRETRAINED, {"model": name})
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "not a model folder" in errors
    home = os.path.expanduser("~")
    assert home not in " ".join(_bodies(at)) or name != "~"
    assert "Unrecognized model" not in errors  # transformers' message, with the resolved path


def test_model_name_is_never_live_markdown() -> None:
    from tests.test_hostile import raw_markup

    name = ":red[evil] **bold** [x](javascript:alert(1))"
    at = app(PRETRAINED, {"model": name})
    assert not at.exception and at.error
    assert raw_markup(_bodies(at), [":red[evil]", "**bold**", "[x](javascript:alert(1))"]) == []


def test_a_refused_model_name_is_explained_in_chinese_with_the_original_below() -> None:
    at = app(PRETRAINED, {"model": "x" * 1000, "lang": "中文"})
    assert not at.exception
    assert [e.value for e in at.error] == [translate("pretrained.name_refused", "zh")]
    assert at.expander[-1].label == translate("pretrained.error_original", "zh")
    assert "1000 characters" in at.code[-1].value


def test_public_mode_offers_only_the_allowlist(monkeypatch) -> None:
    from attnviz.engine.budget import budget
    from attnviz.engine.bundled import bundled_models

    monkeypatch.setenv("ATTNVIZ_PUBLIC", "1")
    budget.cache_clear()
    try:
        at = app(PRETRAINED, {"model": "/etc"})
        assert not at.exception
        box = at.selectbox(key="model")
        # the bundled models: MiniLM, the one attnviz trained, and the registry LLMs where
        # `attnviz models` installed them (attnviz.bundled_models())
        installed = [m.name for m in bundled_models() if m.installed]
        assert installed[:2] == ["sentence-transformers/all-MiniLM-L6-v2", "attnviz-char-zh-en"]
        assert list(box.options) == installed
        assert not any("/etc" in b for b in _bodies(at))
        assert budget().max_tokens == 256  # public mode's token limit
        from attnviz.serve.public import check_model

        with pytest.raises(ValueError, match="not available on this server"):
            check_model("~/models/secret")
        with pytest.raises(ValueError, match="not available on this server"):
            check_model("/tmp/model.gguf")  # no paths, a GGUF file's neither
    finally:
        monkeypatch.undo()
        budget.cache_clear()


def test_layers_slider_follows_the_budget_when_the_text_grows() -> None:
    at = app(query={"d_model": "1024", "dk_auto": "false", "d_head": "256", "heads": "32"})
    at.toggle(key="scale").set_value(False).run()  # the link fits: this run traces
    at.slider(key="layers").set_value(6).run()
    assert not at.exception and at.slider(key="layers").value == 6  # 10 tokens: 6 layers fit
    at.text_area(key="text").set_value("word " * 600).run()  # 512 tokens: 2 layers of 32 heads
    assert not at.exception, at.exception
    assert at.slider(key="layers").max == 2 and at.slider(key="layers").value == 2
    assert not at.error


def test_the_lab_limits_come_from_the_budget_and_the_serving_knobs() -> None:
    # ATTNVIZ_LAB_SECONDS is a Budget field, ATTNVIZ_LAB_RUNS a Serving one
    # (attnviz.serve.settings), checked like every other limit
    import subprocess
    import sys

    code = (
        "import attnviz.training.lab as lab, attnviz.serve.lab as jobs; "
        "print(lab.LAB_SECONDS, jobs.LAB_RUNS)"
    )
    env = dict(os.environ, ATTNVIZ_LAB_SECONDS="5", ATTNVIZ_LAB_RUNS="3")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["5.0", "3"], done.stderr
    env["ATTNVIZ_LAB_RUNS"] = "0"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode and "lab_runs=0 must be a positive whole number" in done.stderr
