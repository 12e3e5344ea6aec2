"""The Head atlas page in a real browser: the grid of every head drawn, a click on a square picks
that head (into the URL), the example opens in the Pretrained model page's Head detail with the
row outlined; both languages and projector mode, shot at 1920x1080 and 1280x800."""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e.conftest import HOLD_ATLAS, Page

CHART = '[data-testid="stPlotlyChart"]'
POINTS = f"{CHART} .scatterlayer .trace .points path"


def _atlas(page: Page, query: str = "") -> Page:
    page.open(f"atlas{query}")
    # The bundled model loads in the background on a fresh server, then the page reruns.
    page.wait_count(CHART, 2, timeout=180, at_least=True)
    page.settle()
    page.wait_count(POINTS, 72, timeout=30, at_least=True)
    return page


def test_grid_click_picks_a_head_and_opens_head_detail(page) -> None:
    _atlas(page, "?at_head=2")
    # 6 layers x 12 heads, one clickable square each.
    assert page.count(POINTS) == 72
    # Layer 0 head 2 of all-MiniLM-L6-v2 follows the previous token (README, Head atlas).
    assert "Layer 0, head 2: previous token" in page.page.inner_text("body")
    page.shot("atlas-previous-token")
    # A click on a square of the grid picks that head.
    square = page.page.locator(POINTS).nth(5)
    square.click(force=True)
    page.settle()
    time.sleep(1)
    page.settle()
    picked = re.search(r"Layer (\d), head (\d+):", page.page.inner_text("body"))
    assert picked and (picked.group(1), picked.group(2)) != ("0", "2"), picked
    assert f"at_layer={picked.group(1)}" in page.page.url or picked.group(1) == "0"
    assert f"at_head={picked.group(2)}" in page.page.url
    # The example row opens in Head detail on the model page (a new tab), its cell outlined.
    with page.page.context.expect_page() as opened:
        page.page.get_by_text("Open this row in Head detail").click()
    detail = Page.__new__(Page)
    detail.url, detail.page, detail.size = page.url, opened.value, page.size
    detail.page.wait_for_load_state()
    detail.wait_count(CHART, 1, timeout=120, at_least=True)
    detail.settle()
    assert "/pretrained" in detail.page.url and "mark=" in detail.page.url
    assert "Outlined" in detail.page.inner_text("body")
    detail.shot("atlas-opened-in-head-detail")
    detail.page.close()


@pytest.mark.parametrize(
    "query,expect",
    [
        ("?at_layer=1&at_head=11", "Layer 1, head 11: first token"),
        ("?lang=zh&at_layer=0&at_head=2", "第 0 层，第 2 个头：前一个词元"),
        ("?projector=true&at_layer=0&at_head=2", "Layer 0, head 2: previous token"),
    ],
    ids=["en", "zh", "projector"],
)
def test_atlas_screens(page, query, expect) -> None:
    _atlas(page, query)
    for _ in page.sizes():  # one run of the page, checked and shot at both window sizes
        assert page.count(POINTS) >= 72
        assert expect in page.page.inner_text("body")
        name = {"?at": "en", "?la": "zh", "?pr": "projector"}[query[:3]]
        page.shot(f"atlas-{name}")


def test_qk_map_point_opens_its_row(big_page) -> None:
    _atlas(big_page, "?at_head=2&at_qk=true&at_qk_colour=kind")
    big_page.wait_count(CHART, 3, timeout=120, at_least=True)
    big_page.settle()
    assert "Q/K map of this head" in big_page.page.inner_text("body")
    big_page.shot("atlas-qk-map")
    qk_points = big_page.page.locator(CHART).nth(2).locator(".scatterlayer .trace .points path")
    assert qk_points.count() > 100  # every query and key of the probe set
    qk_points.nth(10).click(force=True)
    big_page.settle()
    time.sleep(1)
    big_page.settle()
    assert "Picked:" in big_page.page.inner_text("body")
    assert big_page.page.get_by_text("Open this row in Head detail").count() == 2


def test_stop_button_stops_measuring_and_measure_again_finishes(page) -> None:
    import random
    from urllib.parse import quote

    rng = random.Random()  # texts this server has not measured yet: not in its atlas cache
    words = [
        "cat",
        "dog",
        "sun",
        "moon",
        "tree",
        "river",
        "stone",
        "cloud",
        "bird",
        "fish",
        "road",
        "house",
    ]
    lines = [" ".join(rng.choice(words) for _ in range(14)) for _ in range(50)]
    # The server holds this measurement at its first text until the Stop click's rerun (once per
    # session): otherwise the 50 texts could be measured before the click landed.
    lines[0] = f"{lines[0]} {HOLD_ATLAS}"
    page.page.goto(f"{page.url}/atlas?at_texts={quote(chr(10).join(lines))}")
    stop = page.page.get_by_role("button", name="Stop")
    stop.wait_for(timeout=180_000)
    stop.click()
    page.settle()
    body = page.page.inner_text("body")
    assert "Measuring was stopped" in body, body[:2000]
    assert page.count(CHART) == 0
    page.page.get_by_role("button", name="Measure again").click()
    page.wait_count(CHART, 2, timeout=180, at_least=True)
    page.settle()
    assert "61 texts measured (50 of them yours)" in page.page.inner_text("body")


@pytest.mark.parametrize(
    "lang,expect",
    [
        ("en", "Layer 1, head 0: previous token · self"),
        ("zh", "第 1 层，第 0 个头：前一个词元 · 自身"),
    ],
    ids=["en", "zh"],
)
def test_every_role_of_a_decoder_head(page, lang, expect) -> None:
    """The char model's L1H0 passes two roles: both named, the further one a dot on the grid;
    the texts where it is strongest below its example. Shot at both sizes."""
    page.open(f"atlas?lang={lang}&at_pick=attnviz-char-zh-en&at_probes=en&at_layer=1&at_head=0")
    page.wait_count(CHART, 2, timeout=180, at_least=True)
    page.settle()
    for _ in page.sizes():
        body = page.page.inner_text("body")
        assert expect in body, body[:1500]
        assert page.count(POINTS) >= 32 + 1  # 4 x 8 squares and the further role's dot
        page.shot(f"atlas-roles-{lang}")


@pytest.fixture(scope="module")
def saved_atlas(tmp_path_factory):
    """An atlas.parquet as `attnviz atlas` writes it (the same score_batch and Store, no Ray)."""
    from attnviz.engine.hooked import load_model
    from attnviz.measures.roles import probe_list
    from attnviz.serve import corpus

    texts = probe_list("en")[:8]
    out = tmp_path_factory.mktemp("saved")
    store = corpus.Store.open(out, corpus.Manifest("attnviz-char-zh-en", 256, 8, 8, "x"))
    store.write_part(
        0, corpus.score_batch(load_model("attnviz-char-zh-en"), list(enumerate(texts)), 256)
    )
    store.finish(corpus.Corpus(tuple(texts), tuple(f"notes.txt:{i + 1}" for i in range(8))))
    return out / "atlas.parquet"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_saved_corpus_atlas_uploaded(page, saved_atlas, lang) -> None:
    page.open(f"atlas?lang={lang}&at_source=saved&at_layer=1&at_head=0")
    page.settle()
    page.page.locator('[data-testid="stFileUploader"] input[type=file]').set_input_files(
        str(saved_atlas)
    )
    page.wait_count(CHART, 1, timeout=60, at_least=True)
    page.settle()
    for _ in page.sizes():
        body = page.page.inner_text("body")
        assert "notes.txt:" in body and page.count(POINTS) >= 32, body[:1500]
        assert ("8 texts measured" if lang == "en" else "测量了 8 条文本") in body
        page.shot(f"atlas-saved-{lang}")
