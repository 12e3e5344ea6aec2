"""The Patch view on the Pretrained page in AppTest (the bundled character decoder): the exact
head map is attnviz.patch's, the AtP map attnviz.attribution_patching's with its misses outlined,
the residual map AtP's (or the exact sweep's, from a link) with a linked cell's causal cone
shaded; answer, foil and cell come from the URL; a text of another length says why; Chinese."""

from __future__ import annotations

import numpy as np
import pytest

import attnviz
from tests.apphelpers import page_text, pretrained_view, specs, titled, z_of

CHAR = "attnviz-char-zh-en"
TEXT = "The animal didn't cross the street because it was too tired. The animal didn't cross the s"
EDIT = TEXT.replace("tired", "sleep", 1)  # five characters too: as many tokens


@pytest.fixture(scope="module")
def model():
    return attnviz.load_model(CHAR, device="cpu")


def open_patch(**query: str):
    return pretrained_view(CHAR, TEXT, "patch", **query)


def test_the_maps_are_the_engines_sweeps(model) -> None:
    at = open_patch(cmp=EDIT)
    exact = attnviz.patch(model, TEXT, EDIT)
    atp = attnviz.attribution_patching(model, TEXT, EDIT, exact=exact)
    z = z_of(titled(at, "Exact"))
    for row in exact.itertuples():
        assert z[row.layer, row.head] == pytest.approx(row.effect, abs=1e-4)
    atp_spec = titled(at, "Attribution patching")
    z = z_of(atp_spec)
    for row in atp.itertuples():
        assert z[row.layer, row.head] == pytest.approx(row.effect, abs=1e-4)
    outlined = [s for s in atp_spec["layout"].get("shapes", []) if s.get("name") == "miss"]
    assert len(outlined) == 2 * int(atp["miss"].sum()) > 0  # black, and white inside
    resid = attnviz.attribution_patching(model, TEXT, EDIT, over="residual")
    z = z_of(titled(at, "Residual stream, AtP"))
    for row in resid.itertuples():
        assert z[row.layer, row.position] == pytest.approx(row.effect, abs=1e-4)
    keys = [b.key for b in at.get("download_button")]
    assert "csv_patch" in keys and "csv_patch_resid" in keys
    assert f"{exact.attrs['clean']:.3f}" in page_text(at)


def test_a_link_picks_answer_foil_exact_residual_and_the_cone(model) -> None:
    at = open_patch(cmp=EDIT, pt_answer="t", pt_foil="e", pt_exact_resid="true", pt_cell="1,5")
    exact = attnviz.patch(model, TEXT, EDIT, answer="t", foil="e", over="residual")
    spec = titled(at, "Residual stream, exact")
    z = z_of(spec)
    for row in exact.itertuples():
        assert z[row.layer, row.position] == pytest.approx(row.effect, abs=1e-4)
    cone = [s for s in spec["layout"]["shapes"] if s.get("name") == "cone"]
    assert len(cone) == 1 and cone[0]["x0"] == 4.5 and cone[0]["y0"] == 1.5
    assert at.query_params["pt_answer"] == "t" and at.query_params["pt_cell"] == "1,5"


def test_another_length_or_no_text_says_why() -> None:
    at = open_patch()
    assert at.info and "corrupted copy" in at.info[0].value
    at = open_patch(cmp=TEXT.replace("tired", "sad", 1))
    assert at.info and "same number of tokens" in at.info[0].value
    assert not specs(at) or all("Exact" not in s["layout"]["title"]["text"] for s in specs(at))


def test_in_chinese() -> None:
    at = open_patch(cmp=EDIT, lang="zh")
    text = page_text(at)
    assert "精确" in text and "残差流" in text and "点击一个头" in text
    assert np.isfinite(z_of(titled(at, "精确"))).any()
