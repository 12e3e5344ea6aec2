"""The formulas the pages show are written from the knobs that computed the numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnviz.lessons import formulas
from attnviz.lessons.formulas import Knobs
from attnviz.lessons.walkthrough import walkthrough
from tests.apphelpers import app, heatmap_specs, z_of

STEPS_PAGE = "app_pages/step_by_step.py"


@pytest.mark.parametrize(
    "use_scale, temperature, masked",
    list(itertools.product([True, False], [1.0, 0.5], [True, False])),
)
def test_every_formula_says_what_the_knobs_do(use_scale, temperature, masked) -> None:
    knobs = Knobs(use_scale=use_scale, temperature=temperature, masked=masked)
    for text in [
        formulas.step("scaled", knobs),
        formulas.step("weights", knobs),
        formulas.step("z", knobs),
        formulas.column_form(knobs),
        formulas.head(knobs),
    ]:
        assert (r"\sqrt{d_k}" in text) == use_scale, text
        assert ("T = 0.5" in text) == (temperature != 1.0), text
        assert ("+ M" in text) == masked, text
        assert (r"-\infty" in text) == masked, text
    assert formulas.step("scores", knobs) == r"S = Q K^\top"


def test_knobs_reject_a_bad_temperature_and_step() -> None:
    with pytest.raises(ValueError, match="temperature"):
        Knobs(temperature=0)
    with pytest.raises(ValueError, match="step"):
        formulas.step("logits", Knobs())


def _latex(at) -> list[str]:
    return [e.body for e in at.get("latex")]


def test_step_page_formulas_follow_the_scale_toggle() -> None:
    # On the old main, steps 3 and 4 and the column form said ÷√d_k with the scale off.
    for step in ("1", "2", "3"):
        at = app(STEPS_PAGE, query={"st_scale": "false", "step": step})
        assert not at.exception
        shown = _latex(at)
        assert shown and not any("sqrt" in f for f in shown), (step, shown)
    at = app(STEPS_PAGE, query={"step": "2"})
    assert all("sqrt" in f for f in _latex(at)), _latex(at)


def test_step_page_shows_the_mask_as_plus_m_with_minus_infinity_cells() -> None:
    at = app(STEPS_PAGE, query={"st_causal": "true", "step": "1"})
    assert not at.exception
    assert any("+ M" in f and r"-\infty" in f for f in _latex(at))
    spec = next(s for s in heatmap_specs(at) if s["layout"]["title"]["text"].startswith("2 ·"))
    wt = walkthrough(causal=True)
    np.testing.assert_allclose(
        np.nan_to_num(z_of(spec), nan=-1e9),
        torch.nan_to_num(wt.scaled, neginf=-1e9).numpy(),
        atol=1e-5,
    )
    labels = spec["data"][1]
    assert labels["type"] == "scatter" and set(labels["text"]) == {"−∞"}
    n = len(wt.tokens)
    pairs = zip(labels["y"], labels["x"], strict=True)
    cells = {(int(y.split(":")[0]), int(x.split(":")[0])) for y, x in pairs}
    assert cells == {(i, j) for i in range(n) for j in range(n) if j > i}
    assert any("−∞" in c.value for c in at.caption)  # the followed row, in numbers


def test_step_page_temperature_reaches_numbers_and_formula() -> None:
    at = app(STEPS_PAGE, query={"st_temp": "0.25", "step": "1"})
    assert not at.exception
    assert any("T = 0.25" in f for f in _latex(at))
    spec = next(s for s in heatmap_specs(at) if s["layout"]["title"]["text"].startswith("2 ·"))
    wt = walkthrough()
    # d_k = 4: scale 1/2 at T = 1, 2 at T = 0.25
    np.testing.assert_allclose(z_of(spec), (wt.scores * 2).numpy(), atol=1e-5)
    assert abs(walkthrough(temperature=0.25).scale - 4 * wt.scale) < 1e-9


def test_multihead_formula_follows_its_config() -> None:
    at = app("app_pages/multihead.py")
    assert not at.exception
    assert any(r"\sqrt{d_k}" in f and "+ M" not in f for f in _latex(at))
