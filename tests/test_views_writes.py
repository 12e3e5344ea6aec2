"""The views of what a head writes (moved, words, head logits, the logit lens, compare) show the
engine's numbers: a lean trace's the same as a full trace's, the grids the same as the tables, the
difference map the same as b − a computed cell by cell."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz
from attnviz.engine.trace import pooled_weights
from attnviz.engine.writes import row_shares
from attnviz.measures.compare import compare_fields
from attnviz.measures.pieces import scheme
from attnviz.measures.stats import head_stats, special_share
from attnviz.measures.words import grouped
from attnviz.views import compare, panels, writes
from attnviz.views.selection import Selection
from tests.apphelpers import decode
from tests.test_lean import _build, set_full_bytes

# Words of several pieces (WordPiece ##), so that grouping into words changes the tokens.
TEXT = "the unbelievably tired animal didn't cross the street because it was exhausted"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Lean and full traces of one ~280-token input and of its edit, through a tiny GQA Llama."""
    from transformers import AutoTokenizer

    from attnviz.engine.hooked import resolve, trace_model

    tok = AutoTokenizer.from_pretrained(resolve(None)[0])
    tok.model_max_length = 16_384
    model, _ = _build("llama", tmp_path_factory.mktemp("writes"), tok)
    texts = (" ".join([TEXT] * 16), " ".join([TEXT] * 8 + [TEXT.replace("it", "they")] * 8))
    mp = pytest.MonkeyPatch()
    out = {}
    for name, limit in (("lean", 1), ("full", 2**40)):
        set_full_bytes(mp, limit)
        out[name] = [trace_model(model, text, mask_tokens=[5]) for text in texts]
    set_full_bytes(mp, None)
    mp.undo()
    assert out["lean"][0].layers[0].in_bands and not out["full"][0].layers[0].in_bands
    return out


def _figure_data(fig) -> list:
    data = fig.to_dict()["data"]
    return [decode(d["z"]) if "z" in d else d.get("source") for d in data]


def test_moved_views_of_a_lean_trace_are_the_full_ones(traces) -> None:
    lean, full = traces["lean"][0], traces["full"][0]
    torch.testing.assert_close(
        pooled_weights(lean, 96, 96, "moved"), pooled_weights(full, 96, 96, "moved"),
        atol=1e-6, rtol=1e-4,
    )  # fmt: skip
    sel = Selection(layer=1, head=3, field="moved", query=40, key=12, window=(0, 64))
    for build in (panels.head_image_figure, panels.link_figure):
        a, b = _figure_data(build(lean, sel)), _figure_data(build(full, sel))
        for x, y in zip(a, b, strict=True):
            assert x == y if isinstance(x, str) else np.allclose(x, y, atol=1e-6)
    moved = panels.detail_figures(lean, sel)[2]
    want = full.layers[1].moved[3, :64, :64].numpy()
    want[~full.layers[1].block("mask", 3, slice(0, 64), slice(0, 64)).numpy()] = np.nan  # blank
    np.testing.assert_allclose(decode(moved.to_dict()["data"][0]["z"]), want, atol=1e-6)
    # the link grid holds moved[query, key] of every head
    grid = decode(panels.link_figure(full, sel).to_dict()["data"][0]["z"])
    np.testing.assert_allclose(grid[1, 3], float(full.layers[1].moved[3, 40, 12]), rtol=1e-5)


def test_statistics_of_moved_and_the_kobayashi_shares_of_a_lean_trace(traces) -> None:
    lean, full = traces["lean"][0], traces["full"][0]
    got, want = head_stats(lean, "moved"), head_stats(full, "moved")
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=2e-5, rtol=1e-4)
    # the oracle: the weights' statistics of moved's rows scaled to sum to 1
    shares = row_shares(full.layers[1].moved)  # [head, q, k]
    mean_max = shares.amax(-1).mean(-1)  # every row attends (causal: the first key at least)
    torch.testing.assert_close(want["max_weight"][1], mean_max, atol=1e-5, rtol=0)
    a, b = special_share(lean), special_share(full)
    np.testing.assert_allclose(a.to_numpy(float), b.to_numpy(float), atol=1e-6)


def test_words_of_a_lean_trace_are_the_full_traces_words(traces) -> None:
    lean, full = (grouped(traces[k][0], "word") for k in ("lean", "full"))
    assert len(lean.tokens) < len(traces["lean"][0].tokens)  # "unbelievably" was pieces
    assert "unbelievably" in lean.tokens
    for field in ("weights", "moved"):
        torch.testing.assert_close(
            pooled_weights(lean, 64, 64, field), pooled_weights(full, 64, 64, field),
            atol=1e-6, rtol=1e-4,
        )  # fmt: skip
        got, want = head_stats(lean, field), head_stats(full, field)
        for name in want:
            torch.testing.assert_close(got[name], want[name], atol=2e-5, rtol=1e-4)
    sel = Selection(layer=0, head=1, window=(0, 40))
    (words_detail,) = panels.detail_figures(full, sel)  # weights alone: scores do not group
    np.testing.assert_allclose(
        decode(words_detail.to_dict()["data"][0]["z"]), full.layers[0].weights[1, :40, :40],
        atol=1e-6,
    )  # fmt: skip


def test_a_server_pools_a_lean_traces_words_in_one_pass_a_layer_per_core(traces) -> None:
    """The overview of a long input's words: bandpool makes every layer's pooled maps (weights
    and moved from one pass) in its threads; the engine then finds them, equal to the full
    trace's words."""
    from attnviz.engine.bands import THUMB
    from attnviz.serve import bandpool

    words, full = grouped(traces["lean"][0], "word"), grouped(traces["full"][0], "word")
    assert bandpool.pending(words, maps=True) and not bandpool.pending(words)
    bandpool.fill(words, maps=True)
    assert not bandpool.pending(words, maps=True)
    for field in ("weights", "moved"):
        torch.testing.assert_close(
            pooled_weights(words, THUMB, THUMB, field), pooled_weights(full, THUMB, THUMB, field),
            atol=1e-6, rtol=1e-4,
        )  # fmt: skip


def test_compare_of_lean_traces_is_the_full_one(traces) -> None:
    got = compare_fields(*traces["lean"])
    want = compare_fields(*traces["full"])
    for field in ("weights", "moved"):
        a = got[field].sort_values(["layer", "head"])
        b = want[field].sort_values(["layer", "head"])
        assert (a["method"] == "aligned").all()
        np.testing.assert_allclose(a["change"], b["change"], atol=1e-6, rtol=1e-5)
        if field == "moved":  # weights have none: their rows sum to 1
            np.testing.assert_allclose(a["change_rel"], b["change_rel"], atol=1e-6, rtol=1e-5)


def test_the_difference_map_is_b_minus_a_on_the_aligned_tokens(traces) -> None:
    a, b = traces["full"]
    table = compare_fields(a, b)["weights"]
    sel = Selection(layer=1, head=3)
    figs = compare.pair_figures(a, b, sel, table)
    assert len(figs) == 3
    qa, qb, ka, kb = compare.pairs_of(table, a, b)
    wa, wb = a.layers[1].weights[3], b.layers[1].weights[3]  # [q, k]
    want = wb[qb][:, kb] - wa[qa][:, ka]  # [aligned, aligned]
    got = compare.aligned_difference(a, b, sel, table)
    assert len(qa) > 256  # pooled to a picture's side: compare the pooled oracle
    pooled = torch.nn.functional.adaptive_avg_pool2d(want[None], tuple(got.shape))[0]
    torch.testing.assert_close(got, pooled, atol=1e-6, rtol=1e-4)
    grid = compare.change_grid_figure(table, sel)
    z = decode(grid.to_dict()["data"][0]["z"])
    top = table.iloc[0]
    assert z[int(top["layer"]), int(top["head"])] == pytest.approx(top["change"], rel=1e-5)


def test_two_texts_that_do_not_align_are_compared_by_statistics_only() -> None:
    model = attnviz.load_model("attnviz-char-zh-en", device="cpu")
    a = attnviz.trace_model(model, "the cat sat on the mat")
    b = attnviz.trace_model(model, "我爱水课，狗咬人")
    table = compare.compare_table(a, b, "weights")
    assert (table["method"] == "statistics").all() and table["change"].isna().all()
    assert len(compare.pair_figures(a, b, Selection(layer=1, head=2), table)) == 2  # no diff


def test_head_logits_and_lens_views_draw_the_engines_tables() -> None:
    from attnviz.measures.lens import head_logits, logit_lens

    model = attnviz.load_model("attnviz-char-zh-en", device="cpu")
    trace = attnviz.trace_model(model, "The animal didn't cross the street because it was tir")
    table = head_logits(model, trace, k=writes.K)
    grid, rest = writes.logits_figures(trace, Selection(), model)
    z = decode(grid.to_dict()["data"][0]["z"])  # [layer, head]
    heads = table[table["kind"] == "head"]
    for row in heads.itertuples():
        assert z[row.layer, row.head] == pytest.approx(row.logit, abs=1e-6)
    # the rest's bars (all heads summed, embeddings, MLPs, biases) add up to the model's logit
    total = float(np.sum(decode(rest.to_dict()["data"][0]["y"])))
    assert total == pytest.approx(table.attrs["model_logit"], abs=1e-3)
    # hover names what each head promotes; a click's customdata is (layer, head)
    cells = grid.to_dict()["data"][1]["customdata"]
    first = heads.iloc[0]
    assert writes.cell(first.promote_1) in cells[0][3] or first.promote_1 == ""
    assert writes.picked({"selection": {"points": [{"customdata": [3, 7, "x"]}]}}) == (3, 7)
    lens = logit_lens(model, trace, k=writes.LENS_K)
    heat, line = writes.lens_figures(trace, Selection(lang="zh"), model)
    np.testing.assert_allclose(
        decode(heat.to_dict()["data"][0]["z"]), lens[[f"p_{i}" for i in range(1, 6)]], atol=1e-6
    )
    np.testing.assert_allclose(decode(line.to_dict()["data"][0]["y"]), lens["final_p"], atol=1e-6)
    assert "Logit 透镜" in heat.layout.title.text


def test_a_wordpiece_text_with_no_continuation_pieces_is_words_already() -> None:
    tokens = ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert scheme(tokens, {0, 4}) == "words"
    assert grouped(attnviz.trace_text("the cat sat", attnviz.StackConfig()), "word").tokens
