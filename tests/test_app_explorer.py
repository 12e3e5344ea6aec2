"""The explorer views on the Playground (the Pretrained page shares them): each view, each
control."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz import StackConfig, trace_text
from attnviz.ui.sidebar import DEFAULT_TEXT
from tests.apphelpers import app, decode, heatmap_specs, page_text, specs, z_of


def view(name: str, **query: str):
    at = app(query={"view": name, **query})
    assert not at.exception, at.exception
    return at


def reference(**cfg) -> object:
    return trace_text(DEFAULT_TEXT, StackConfig(**cfg))


VIEWS = ["heads", "overview", "detail", "query", "link", "outputs", "stats"]


@pytest.mark.parametrize("name", VIEWS)
@pytest.mark.parametrize("lang", ["English", "中文"])
def test_every_view_renders_in_both_languages(name: str, lang: str) -> None:
    at = app()
    at.radio(key="lang").set_value(lang).run()
    at.segmented_control(key="view").set_value(name).run()
    assert not at.exception
    text = page_text(at)
    assert ("实验场" in text) == (lang == "中文")
    assert len(at.get("download_button")) >= 1  # the whole trace as JSON, on every view


def test_overview_is_one_image_and_selection_drives_the_detail() -> None:
    at = app()
    at.segmented_control(key="view").set_value("overview").run()
    with pytest.raises(KeyError):
        at.slider(key="layer")  # one layer: no layer slider to move
    images = [s for s in specs(at) if s["data"][0]["type"] == "image"]
    assert len(images) == 1
    at.slider(key="head").set_value(3).run()
    ref = reference()
    weights = [z_of(s) for s in heatmap_specs(at)][-1]
    np.testing.assert_allclose(weights, ref.layers[0].weights[3].numpy(), atol=1e-6)


def test_detail_shows_scores_logits_and_weights_of_the_chosen_head() -> None:
    at = app(query={"view": "detail", "head": "2", "causal": "true"})
    assert not at.exception
    scores, logits, weights = (z_of(s) for s in heatmap_specs(at))
    ref = reference(causal=True).layers[0]
    np.testing.assert_allclose(scores, ref.scores[2].numpy(), atol=1e-5)
    allowed = ref.mask.numpy()  # causal: a key after the query is masked, drawn as masked
    np.testing.assert_allclose(weights[allowed], ref.weights[2].numpy()[allowed], atol=1e-6)
    assert np.isnan(weights[~allowed]).all()  # an empty cell, not a weight of 0.00
    assert np.isnan(logits[0, 1:]).all()  # masked logits are -inf, drawn as empty cells
    np.testing.assert_allclose(logits[1, :2], ref.scores[2, 1, :2].numpy() * ref.scale, atol=1e-5)


def test_scaling_toggle_changes_the_detail_weights() -> None:
    at = view("detail")
    before = z_of(heatmap_specs(at)[2])
    at.toggle(key="scale").set_value(False).run()
    after = z_of(heatmap_specs(at)[2])
    assert not np.allclose(before, after)


def test_one_query_table_softmax_equals_the_weights_row() -> None:
    at = view("query", head="1", query="7")
    table = at.dataframe[0].value
    ref = reference().layers[0]
    np.testing.assert_allclose(table["softmax"].to_numpy(), ref.weights[1, 7].numpy(), atol=1e-6)
    np.testing.assert_allclose(table["q·k"].to_numpy(), ref.scores[1, 7].numpy(), atol=1e-5)
    bar = next(s for s in specs(at) if s["data"][0]["type"] == "bar")
    np.testing.assert_allclose(decode(bar["data"][0]["y"]), ref.weights[1, 7].numpy(), atol=1e-6)
    # The q_i·k_i products sum, per key, to that key's score.
    products = z_of(heatmap_specs(at)[1])
    np.testing.assert_allclose(products.sum(-1), ref.scores[1, 7].numpy(), atol=1e-4)


def test_outputs_show_z_and_the_block_output() -> None:
    at = view("outputs", head="3")
    z, out = (z_of(s) for s in heatmap_specs(at))
    ref = reference().layers[0]
    np.testing.assert_allclose(z, ref.z[3].numpy(), atol=1e-5)
    np.testing.assert_allclose(out, ref.output.numpy(), atol=1e-5)


def test_stats_table_has_every_head_and_downloads_as_csv() -> None:
    at = view("stats", heads="8")
    table = at.dataframe[0].value
    shown = {"entropy", "max weight", "on self", "on previous"}  # display names (CSV: engine's)
    assert len(table) == 8 and shown <= set(table.columns)
    labels = [b.label for b in at.get("download_button")]
    assert "Download the table (CSV)" in labels


def test_gauges_move_with_scaling() -> None:
    at = view("heads", d_model="512", heads="2")

    def gauge_values() -> list[float]:  # mean max weight, entropy / uniform (two st.metric)
        return [float(m.value) for m in at.metric]

    scaled = gauge_values()
    at.toggle(key="scale").set_value(False).run()
    unscaled = gauge_values()
    assert unscaled[0] > scaled[0] + 0.2  # mean max weight rises: softmax saturates
    assert unscaled[1] < scaled[1]  # entropy falls
