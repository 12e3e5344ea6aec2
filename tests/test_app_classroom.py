"""The classroom pages (notes 000-004) in AppTest: both languages, every step, live numbers."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.lessons.walkthrough import column_form, walkthrough
from tests.apphelpers import app, decode, heatmap_specs, page_text, specs, z_of

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


WHY_PAGE = "app_pages/why_scale.py"
MULTIHEAD_PAGE = "app_pages/multihead.py"


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_why_scale_page_shows_the_measured_numbers(lang: str) -> None:
    from attnviz.lessons.scaling import saturation_sweep

    at = app(WHY_PAGE, query={"lang": lang})
    assert not at.exception
    ratio = float(at.metric[0].value)
    assert abs(ratio - 1) < 0.05  # Var(q·k) / d_k at d_k = 64
    assert abs(float(at.metric[1].value) - 8) < 0.4  # std 8, as note 004 says
    lines = {
        s["layout"]["title"]["text"]: s for s in specs(at) if s["data"][0]["type"] == "scatter"
    }
    assert len(lines) == 4
    rows = saturation_sweep()
    unscaled = [r["max_weight"] for r in rows if not r["scaled"]]
    sat = next(s for k, s in lines.items() if "16" in k)
    shown = [decode(tr["y"]) for tr in sat["data"]]
    assert any(np.allclose(y, unscaled) for y in shown)


def test_why_scale_live_pair_saturates_unscaled() -> None:
    at = app(WHY_PAGE, query={"ws_dk": "256"})
    scaled, unscaled = (z_of(s) for s in heatmap_specs(at))
    assert unscaled.max(-1).mean() > scaled.max(-1).mean() + 0.2


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_multihead_page_reproduces_note_001_and_table_3(lang: str) -> None:
    at = app(MULTIHEAD_PAGE, query={"lang": lang})
    assert not at.exception
    params = at.dataframe[1].value
    assert list(params.iloc[:, 2][:2]) == ["3.000 d²", "4.000 d²"]
    table3 = at.dataframe[-1].value
    ratios = [float(r) for r in table3.iloc[:, -1] if r != "—"]
    assert len(ratios) == 11 and max(abs(r - 1) for r in ratios) < 0.07
    assert list(table3.iloc[:, -1]).count("—") == 4  # rows A: the paper gives no count
    big = table3.iloc[-1]
    assert abs(big.iloc[-2] / 213 - 1) < 0.05
    shapes = at.dataframe[0].value
    assert shapes.iloc[-1].iloc[-1].endswith("× 512")


def test_multihead_page_kv_cache_shrinks_with_sharing() -> None:
    at = app(MULTIHEAD_PAGE, query={"mh_kv": "2"})
    assert not at.exception
    kv = next(d.value for d in at.dataframe if "MQA" in list(d.value.iloc[:, 0]))
    sizes = [float(x.split()[0].replace(",", "")) for x in kv.iloc[:, 3]]
    assert list(kv.iloc[:, 0]) == ["MHA", "GQA", "MQA"]
    assert sizes[0] == pytest.approx(4 * sizes[1], rel=1e-3) and sizes[1] == pytest.approx(
        2 * sizes[2], rel=1e-3
    )


def test_sharing_page_has_the_notes_comparison_table() -> None:
    at = app(SHARING_PAGE, query={"sh_kv": "2"})
    table = at.table[0].value  # an HTML table: its cells hold sentences, which it wraps
    assert list(table.columns)[1:] == ["MHA", "MQA", "GQA (G = 2)"]
    kv_row = table[table.iloc[:, 0] == "K/V heads"].iloc[0]
    assert list(kv_row[1:]) == ["8", "1", "2"]


def test_step_index_is_in_the_url() -> None:
    at = app(STEPS_PAGE, query={"step": "2"})
    assert not at.exception
    assert at.subheader[0].value.startswith("3 ·")


POSITIONS_PAGE = "app_pages/positions.py"


@pytest.mark.parametrize("lang", ["English", "中文"])
def test_positions_page_shows_order_blindness_and_the_kernel(lang: str) -> None:
    at = app(POSITIONS_PAGE, query={"lang": lang})
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table.iloc[:, 0]) == ["狗", "咬", "人"]
    assert all(float(x) < 1e-5 for x in table.iloc[:, 1])  # no positions: the same outputs
    assert all(float(x) > 1e-2 for x in table.iloc[:, 2])  # sinusoidal: different
    bars = next(s for s in specs(at) if s["data"][0]["type"] == "bar")
    weights = decode(bars["data"][0]["y"])
    assert int(np.argmax(weights)) == 7 + 2  # peak at query + Δ (Δ = 2 by default)


def test_positions_page_rejects_non_permutations_with_a_message() -> None:
    at = app(POSITIONS_PAGE, query={"po_b": "猫咬人"})
    assert not at.exception
    assert any("same tokens" in i.value for i in at.info)


def test_positions_page_alpha_sharpens_the_relative_peak() -> None:
    wide = decode(
        next(
            s
            for s in specs(app(POSITIONS_PAGE, query={"po_alpha": "0.1"}))
            if s["data"][0]["type"] == "bar"
        )["data"][0]["y"]
    )
    sharp = decode(
        next(
            s
            for s in specs(app(POSITIONS_PAGE, query={"po_alpha": "5.0"}))
            if s["data"][0]["type"] == "bar"
        )["data"][0]["y"]
    )
    assert sharp.max() > wide.max() + 0.3
