"""attnviz.compare: two traces of one model head by head, against a brute-force computation of
the rule (aligned rows' total variation), on the bundled character decoder."""

from __future__ import annotations

import pytest
import torch

import attnviz.engine.budget as budget_module
from attnviz import compare
from attnviz.engine.hooked import load_model, trace_model
from attnviz.measures.compare import aligned
from attnviz.measures.stats import head_stats

A = "我爱水课，因为它很有趣。"
B = "我爱水课，因为他很有趣。"


@pytest.fixture(scope="module")
def model():
    return load_model("attnviz-char-zh-en", device="cpu")


@pytest.fixture(scope="module")
def traces(model):
    return trace_model(model, A), trace_model(model, B)


def brute(a, b, field: str) -> torch.Tensor:
    """The rule, one aligned query and key at a time. [layer, head]"""
    pairs = aligned(a.tokens, b.tokens)
    out = torch.zeros(a.n_layers, a.n_heads, dtype=torch.float64)
    for layer, (la, lb) in enumerate(zip(a.layers, b.layers, strict=True)):
        xa, xb = getattr(la, field).double(), getattr(lb, field).double()  # [head, q, k]
        for i, i2 in pairs:
            d = sum((xa[:, i, j] - xb[:, i2, j2]).abs() for j, j2 in pairs)
            only_a = xa[:, i].sum(-1) - sum(xa[:, i, j] for j, _ in pairs)
            only_b = xb[:, i2].sum(-1) - sum(xb[:, i2, j2] for _, j2 in pairs)
            out[layer] += 0.5 * (d + only_a + only_b)
    return out / len(pairs)


@pytest.mark.parametrize("field", ["weights", "moved"])
def test_change_is_the_rule_ranked(traces, field):
    a, b = traces
    table = compare(a, b, field)
    assert list(table["rank"]) == list(range(1, a.n_layers * a.n_heads + 1))
    assert set(table.method) == {"aligned"} and table.attrs["n_aligned"] == len(a.tokens) - 1
    want = brute(a, b, field)
    for row in table.itertuples():
        assert row.change == pytest.approx(float(want[row.layer, row.head]), abs=1e-6)
    if field == "weights":  # rows sum to 1: change over their mass would be change again
        assert "change_rel" not in table and table.change.is_monotonic_decreasing
        assert table.change.between(0, 1).all()
    else:  # over the rows' mean total moved: another number, on a 0..1 scale
        assert table.change_rel.is_monotonic_decreasing and table.change_rel.between(0, 1).all()
        qa, qb = (torch.tensor(p) for p in zip(*aligned(a.tokens, b.tokens), strict=True))
        for row in table.itertuples():  # the aligned rows' mean total moved, of a and b
            la, lb = a.layers[row.layer], b.layers[row.layer]
            ma = getattr(la, field)[row.head, qa].sum(-1).mean()
            mb = getattr(lb, field)[row.head, qb].sum(-1).mean()
            assert row.change_rel == pytest.approx(row.change / float(0.5 * (ma + mb)), rel=1e-4)
        assert table.change.to_numpy() != pytest.approx(table.change_rel.to_numpy())
    sa, sb = head_stats(a), head_stats(b)
    layer, head = int(table.layer.iloc[0]), int(table["head"].iloc[0])
    d = float(sb["entropy_rel"][layer, head] - sa["entropy_rel"][layer, head])
    assert table.d_entropy_rel.iloc[0] == pytest.approx(d, abs=1e-6)


def test_the_same_input_changes_nothing_and_a_causal_prefix_stays(model, traces):
    a, b = traces
    same = compare(a, trace_model(model, A))
    assert same.change.abs().max() < 1e-6
    # cut at the edit (the 8th character, not aligned): every aligned row comes before it, and
    # a causal model's rows before an edit cannot change
    assert A[:7] == B[:7] and A[7] != B[7]
    cut = compare(trace_model(model, A[:8]), trace_model(model, B[:8]))
    assert cut.change.abs().max() < 1e-6 and cut.attrs["n_aligned"] == 8  # [BOS] + 7
    assert compare(*traces).change.max() > 0.01


def test_unaligned_inputs_compare_statistics_only(model, traces):
    other = trace_model(model, "The cat sat on the mat.")
    table = compare(traces[0], other)
    assert set(table.method) == {"statistics"} and table.change.isna().all()
    deltas = table[[c for c in table.columns if c.startswith("d_")]].abs()
    key = (deltas / deltas.max()).max(axis=1)
    assert key.is_monotonic_decreasing


def test_lean_traces_compare_the_same(model, traces, monkeypatch):
    full = compare(*traces, field="moved")
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        lean = compare(trace_model(model, A), trace_model(model, B), field="moved")
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    merged = full.merge(lean, on=["layer", "head"])
    assert merged.change_x.to_numpy() == pytest.approx(merged.change_y.to_numpy(), abs=1e-5)


def test_two_models_are_refused(model, traces):
    minilm = load_model(device="cpu")
    with pytest.raises(ValueError, match="same model"):
        compare(traces[0], trace_model(minilm, A))
    with pytest.raises(ValueError, match="weights"):
        compare(*traces, field="scores")


def test_the_difference_map_numbers_tokens_as_the_trace_does(traces):
    """The difference map labels each aligned token with its position in your text (as the maps
    above it number them), not its place among the aligned tokens."""
    from attnviz.views import compare as views
    from attnviz.views.selection import Selection

    a, b = traces
    table = compare(a, b, "weights")
    diff = views.pair_figures(a, b, Selection(layer=0, head=0), table)[2].to_dict()["data"][0]
    qa, _, ka, _ = views.pairs_of(table, a, b)
    assert qa.tolist() != list(range(len(qa)))  # 它 -> 他: the edited token does not align
    want_q = [f"{i}: {a.tokens[i]}" for i in qa.tolist()]
    want_k = [f"{j}: {a.key_tokens[j]}" for j in ka.tolist()]
    assert list(diff["y"]) == want_q and list(diff["x"]) == want_k
