"""One rule for masked keys in every view: a masked cell is drawn and printed as masked,
never as a weight of 0.00; baselines are uniform over the keys a row may see; the pairs a view
opens on are ones the mask allows, and a decoder's one-query views open on its last token."""

from __future__ import annotations

import numpy as np
import torch

from attnviz import StackConfig, trace_text
from attnviz.i18n import translate
from attnviz.measures.links import default_link, default_query, is_causal
from attnviz.views import panels
from attnviz.views.selection import Selection
from tests.apphelpers import app, heatmap_specs, z_of

POEM = "床前明月光，疑是地上霜。"


def causal_trace():
    return trace_text(POEM, StackConfig(d_model=16, n_heads=4, n_layers=2, causal=True, seed=1))


def test_a_causal_trace_opens_on_its_last_token_and_links_only_to_keys_it_sees() -> None:
    trace = causal_trace()
    n = len(trace.tokens)
    assert is_causal(trace) and default_query(trace) == n - 1
    for query in range(n):
        q, key = default_link(trace, query)
        assert q == query and key <= query  # never a key in the query's future
    assert list(trace.layers[0].allowed()) == list(range(1, n + 1))  # row i sees i + 1 keys
    encoder = trace_text(POEM, StackConfig(d_model=16, n_heads=4))
    assert not is_causal(encoder) and default_query(encoder) == 0
    assert list(encoder.layers[0].allowed([0, 3])) == [n, n]


def test_masked_cells_are_blank_and_printed_as_a_dash_in_the_link_grid_and_head_detail() -> None:
    trace = causal_trace()
    link = panels.link_figure(trace, Selection(query=2, key=7))  # key 7 is after query 2
    assert np.isnan(np.asarray(link.data[0].z, dtype=float)).all()
    assert set(link.data[1].text) == {"–"}
    scores, logits, weights = panels.detail_figures(trace, Selection(layer=1, head=3))
    w = np.asarray(weights.data[0].z, dtype=float)
    assert np.isnan(w[np.triu_indices(len(trace.tokens), 1)]).all()
    assert np.allclose(np.nansum(w, -1), 1.0, atol=1e-6)  # the allowed cells still sum to 1


def test_step_by_step_prints_masked_weights_as_a_dash() -> None:
    at = app("app_pages/step_by_step.py", query={"st_causal": "true", "step": "2"})
    assert not at.exception
    title = translate("st.step.weights", "en")
    (spec,) = [s for s in heatmap_specs(at) if s["layout"]["title"]["text"].startswith(title)]
    weights = z_of(spec)  # [q, k] the softmax step, 我爱水课
    assert np.isnan(weights[0, 1:]).all() and weights[0, 0] == 1.0
    dashes = [t for t in spec["data"][1:] if t.get("text") and set(t["text"]) == {"–"}]
    assert len(dashes) == 1 and len(dashes[0]["text"]) == 6  # 4 tokens: 3 + 2 + 1 masked cells
    caption = " ".join(c.value for c in at.caption)
    assert "–" in caption  # the chosen row's values: "–" for the keys after the query


def test_the_link_view_opens_a_decoder_link_on_keys_up_to_the_query() -> None:
    at = app(
        "app_pages/pretrained.py",
        query={"model": "attnviz-char-zh-en", "text": POEM, "view": "link", "query": "5"},
    )
    assert not at.exception
    assert at.selectbox(key="query").value == 5 and at.selectbox(key="link_key").value <= 5
    help_text = " ".join(c.value for c in at.caption)
    assert "0.167" in help_text and "6 keys" in help_text  # uniform over the 6 it may see
    assert not at.warning
    grid = torch.tensor(z_of(heatmap_specs(at)[0]))  # a copy: the decoded array is read-only
    assert float(grid.max()) > 0.05  # not a grid of zeros under a "1μ" colour bar
