"""The model pickers of the Pretrained and Generate pages: every bundled model offered
with what it is and its licence, the command that installs a registry LLM that is not there (in
both languages), the choice in the URL, a registry LLM loaded through the picker (a tiny GGUF
stands in for one: converted on first use, traced, generating), the Generate page's decoder by
language, and SmolLM2 continuing the repeated animal sentence with " tired" (the real model, where
`make llms` installed it)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnviz.engine.bundled import REGISTRY, RegistryModel, bundled_models, registry_file
from attnviz.engine.generate import TRAINED_DECODER
from attnviz.i18n import translate
from attnviz.ui import markup, url
from tests import gguf_tiny
from tests.apphelpers import APP, app, page_text

PRETRAINED = "app_pages/pretrained.py"
GENERATE = "app_pages/generate.py"
LANGS = {"English": "en", "中文": "zh"}


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty ATTNVIZ_HOME: no registry LLM installed."""
    monkeypatch.setenv("ATTNVIZ_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _page(page: str, query: dict) -> AppTest:
    """The page as a link opens it, without waiting for the bundled model first (apphelpers.app
    does, for pages that show it): a model that is not installed loads nothing."""
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update(query)
    at.switch_page(page)
    return at.run()


@pytest.mark.parametrize("lang", sorted(LANGS))
def test_a_registry_llm_not_installed_gets_the_command_that_installs_it(home, lang) -> None:
    code = LANGS[lang]
    at = _page(PRETRAINED, {"pick": "smollm2-135m", "lang": lang})
    assert not at.exception and not at.error
    box = at.selectbox(key="pick")
    assert box.value == "smollm2-135m"  # from the link
    names = [m.name.rsplit("/", 1)[-1] for m in bundled_models()]  # MiniLM without its owner
    missing = translate("pick.not_installed", code)
    assert box.options == [f"{n} ({missing})" if n in REGISTRY else n for n in names]
    said = translate(
        "pick.missing", code, name=markup.code("smollm2-135m"), command="attnviz models"
    )
    assert [w.value for w in at.warning] == [said] and "make llms" in said
    assert "Apache-2.0" in page_text(at)  # its licence beside the picker
    assert not at.get("plotly_chart")  # nothing loaded, nothing traced
    # Gemma's terms, on the Generate page, whose picker lists the decoders only
    at = app(GENERATE, {"g_pick": "gemma-3-270m", "lang": lang})
    assert not at.exception and not at.error
    box = at.selectbox(key="g_pick")
    assert box.value == "gemma-3-270m"
    decoders = [m.name for m in bundled_models() if m.kind == "decoder"]
    assert box.options == [f"{n} ({missing})" if n in REGISTRY else n for n in decoders]
    assert "Gemma Terms of Use" in page_text(at) and "attnviz models" in page_text(at)
    package = markup.code(REGISTRY["gemma-3-270m"].packages[0])
    chunks = translate("pick.source_chunks", code, package=package, n=4)
    assert chunks in page_text(at)  # its source in the page's language
    assert code == "en" or "chunk" not in page_text(at)
    assert at.text_area(key="g_prompt").value  # the prompt stays: nothing typed is lost


def test_the_generate_page_opens_on_the_llm_of_its_language_where_installed(home) -> None:
    assert url.default("g_pick", lang="en") == url.default("g_pick", lang="zh") == TRAINED_DECODER
    (home / "gguf").mkdir(parents=True)
    for name in REGISTRY:
        (home / "gguf" / REGISTRY[name].file).write_bytes(b"GGUF")  # present (checked on load)
    assert url.default("g_pick", lang="en") == "smollm2-135m"
    assert url.default("g_pick", lang="zh") == "gemma-3-270m"
    assert url.default("pick") == bundled_models()[0].name  # the Pretrained page: MiniLM


def test_a_registry_llm_loads_through_the_picker_of_both_pages(home, monkeypatch) -> None:
    """A tiny GGUF as a registry LLM: chosen in the picker, converted on first use, traced with
    the next token shown; generating on the Generate page; a typed name still goes first."""
    (home / "gguf").mkdir(parents=True)
    tiny = gguf_tiny.write(home / "gguf" / "tiny-test.gguf")
    entry = RegistryModel(
        name="tiny-test", file=tiny.name, sha256=hashlib.sha256(tiny.read_bytes()).hexdigest(),
        file_bytes=tiny.stat().st_size, packages=("tiny-test==1.0",), member=None, assemble=None,
        kind="decoder", languages=("en",), licence="MIT", parameters=1, about="a test model",
    )  # fmt: skip
    monkeypatch.setitem(REGISTRY, "tiny-test", entry)
    at = _page(PRETRAINED, {"pick": "tiny-test", "device": "cpu"})
    assert not at.exception and not at.error and not at.warning
    assert at.query_params["pick"] in ("tiny-test", ["tiny-test"])  # the choice in the URL
    assert "MIT" in page_text(at) and at.get("plotly_chart")
    assert (home / "converted").is_dir()  # converted once, into the cache
    at = _page(PRETRAINED, {"pick": "tiny-test", "device": "cpu", "text": "the cat"})
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [s["layout"].get("title", {}).get("text", "") for s in specs]
    assert "Next token after “␣cat”" in titles  # drawn as the candidates are: not "Ġcat"
    at = app(GENERATE, {"g_pick": "tiny-test", "g_n": "3"})
    assert not at.exception and not at.error
    assert "**Generated (3 tokens)" in " ".join(m.value for m in at.markdown)
    at.text_input(key="g_model").set_value("/no/such/folder").run()  # a typed name goes first
    assert not at.exception and at.error and at.selectbox(key="g_pick").value == "tiny-test"


@pytest.mark.skipif(registry_file("smollm2-135m") is None, reason="smollm2-135m is not installed")
def test_generate_on_smollm2_continues_the_repeated_sentence_with_tired() -> None:
    # The whole model (30 layers): one new token, loaded from the converted cache.
    said = "The animal didn't cross the street because it was too tired."
    at = app(GENERATE, {"g_prompt": f"{said} {said[:-7]}", "g_n": "1"})
    assert not at.exception and not at.error
    assert at.selectbox(key="g_pick").value == "smollm2-135m"  # English opens on SmolLM2
    assert at.metric[1].value == "␣tired"  # the token chosen at the last step


def test_public_mode_offers_only_the_installed_decoders_and_no_box(home, monkeypatch) -> None:
    from attnviz.engine.budget import budget

    monkeypatch.setenv("ATTNVIZ_PUBLIC", "1")
    budget.cache_clear()
    try:
        at = app(GENERATE, {"g_n": "2", "g_model": "/etc"})
        assert not at.exception and not at.error
        assert at.selectbox(key="g_pick").options == [TRAINED_DECODER]  # nothing fetched here
        assert not [w for w in at.text_input if w.key == "g_model"]  # no typed names or paths
        assert "GPL-3.0-or-later" in page_text(at) and at.get("plotly_chart")
        monkeypatch.setenv("ATTNVIZ_MODELS", "sentence-transformers/all-MiniLM-L6-v2")
        at = app(GENERATE)
        said = translate("gen.no_decoder", "en")
        assert not at.exception and [w.value for w in at.warning] == [said]
    finally:
        monkeypatch.undo()
        budget.cache_clear()


@pytest.mark.parametrize(("page", "pick", "typed"), [(PRETRAINED, "pick", "model"),
                                                     (GENERATE, "g_pick", "g_model")])  # fmt: skip
def test_a_bundled_name_in_the_model_box_shows_in_the_picker(home, page, pick, typed) -> None:
    """A link's `model=smollm2-135m` (or the name typed in the box) selects that model in the
    picker, whose facts and licence then show; from the next run the box is empty and the URL
    holds the model as the pick only, and a model picked after it stays picked."""
    at = _page(page, {typed: "smollm2-135m"})
    assert not at.exception
    assert at.selectbox(key=pick).value == "smollm2-135m"
    assert "Apache-2.0" in page_text(at)
    at.run()  # any next run: the box is empty, the URL holds the pick
    assert at.selectbox(key=pick).value == "smollm2-135m" and at.text_input(key=typed).value == ""
    assert at.query_params.get(pick) in ("smollm2-135m", ["smollm2-135m"])
    assert typed not in at.query_params
    at.selectbox(key=pick).set_value("gemma-3-270m").run()
    assert at.selectbox(key=pick).value == "gemma-3-270m"
    at.text_input(key=typed).set_value(" smollm2-135m ").run()  # typed on the page
    assert at.selectbox(key=pick).value == "smollm2-135m"
    at.run()
    assert at.text_input(key=typed).value == ""
    if page == GENERATE:  # Generate's picker lists decoders only: an encoder's name stays typed
        at.text_input(key=typed).set_value("all-MiniLM-L6-v2").run()
        assert at.text_input(key=typed).value == "all-MiniLM-L6-v2"
