"""The classroom pages (notes 000-004) in AppTest: both languages, every step, live numbers."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.walkthrough import column_form, walkthrough
from tests.apphelpers import app, heatmap_specs, page_text, z_of

STEPS_PAGE = "app_pages/step_by_step.py"


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_step_page_walks_all_four_steps(lang: str) -> None:
    at = app(STEPS_PAGE, query={"lang": lang})
    assert not at.exception
    wt = walkthrough()
    expected = [wt.scores, wt.scaled, wt.weights, wt.z]
    subheaders = []
    for i in range(4):
        step = next(
            s
            for s in heatmap_specs(at)
            if "1 ·" in s["layout"]["title"]["text"]
            or "2 ·" in s["layout"]["title"]["text"]
            or "3 ·" in s["layout"]["title"]["text"]
            or "4 ·" in s["layout"]["title"]["text"]
        )
        np.testing.assert_allclose(z_of(step), expected[i].numpy(), atol=1e-5)
        subheaders.append(at.subheader[0].value)
        nxt = at.button[1]
        assert nxt.disabled == (i == 3)
        if i < 3:
            nxt.click().run()
            assert not at.exception
    assert len(set(subheaders)) == 4
    assert ("逐步" in page_text(at)) == (lang == "中文")
    at.button[0].click().run()  # and back
    assert at.subheader[0].value == subheaders[2]


def test_column_convention_is_shown_with_its_difference() -> None:
    at = app(STEPS_PAGE)
    _, a_soft, diff = column_form(walkthrough())
    assert diff < 1e-6
    shown = [z_of(s) for s in heatmap_specs(at) if s["layout"]["title"]["text"] == "A'"]
    np.testing.assert_allclose(shown[0], a_soft.numpy(), atol=1e-6)


def test_step_page_follows_the_sidebar_sentence() -> None:
    at = app(STEPS_PAGE, query={"st_own": "true"})
    assert not at.exception
    assert [o for o in at.radio(key="st_query").options][:3] == ["The", "animal", "didn't"]
    at.text_area(key="text").set_value("").run()
    assert not at.exception and any("empty" in i.value for i in at.info)


SHARING_PAGE = "app_pages/sharing.py"


@pytest.mark.parametrize("n_kv", [1, 2, 8])
def test_sharing_page_draws_one_k_per_kv_head_and_checks_pass(n_kv: int) -> None:
    at = app(SHARING_PAGE, query={"sh_kv": str(n_kv)})
    assert not at.exception
    assert at.select_slider(key="sh_kv").value == n_kv
    k_maps = [s for s in heatmap_specs(at) if s["layout"]["title"]["text"].startswith("K of KV")]
    assert len(k_maps) == n_kv
    diffs = [float(m.value) for m in at.metric]
    assert len(diffs) == 3 and max(diffs) < 1e-5
    mode = {1: "MQA", 2: "GQA", 8: "MHA"}[n_kv]
    assert f"This is {mode}" in page_text(at)


def test_sharing_page_in_chinese() -> None:
    at = app(SHARING_PAGE, query={"lang": "中文"})
    assert not at.exception and "共享键和值" in at.title[0].value
