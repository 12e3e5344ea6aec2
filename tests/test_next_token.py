"""Next-token top-k with its diff, and a real model's K/V grouping numbers."""

from __future__ import annotations

import pytest
import torch

from attnviz.engine.grouping import expanded_error, mode
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.lessons.costs import kv_cache_bytes
from attnviz.measures.next_token import probabilities, top_k
from attnviz.views.charts import next_tokens


def fake(logits: list[float]) -> Trace:
    return Trace(tokens=["a"], layers=[], source="test", next_logits=torch.tensor(logits))


def test_top_k_is_sorted_softmax_and_keeps_the_demoted_favourite() -> None:
    base = fake([3.0, 2.0, 1.0, 0.0])
    now = fake([0.0, 2.0, 1.0, 3.0])  # token 3 overtakes token 0
    p = probabilities(now)
    torch.testing.assert_close(p.sum(), torch.tensor(1.0))
    rows = top_k(now, str, k=2, base=base)
    assert [r.token_id for r in rows] == [3, 1, 0]  # top 2 now, then base's favourite
    assert [r.rank for r in rows] == [1, 2, 4] and rows[2].rank_base == 1
    assert rows[0].p == pytest.approx(float(p[3])) and rows[0].p_base == pytest.approx(
        float(probabilities(base)[3])
    )
    assert rows[0].delta > 0 > rows[2].delta
    alone = top_k(now, str, k=10)
    assert len(alone) == 4 and alone[0].p_base is None
    fig = next_tokens(rows, title="<b>x</b>")
    assert len(fig.data) == 2 and fig.data[0].orientation == "h"
    assert len(next_tokens(alone).data) == 1


def test_a_demoted_favourite_is_ranked_on_logits_where_its_probability_underflows() -> None:
    """Token 0 leads the base; now 500 logits sit between it and the top, and float32's softmax
    rounds it and 999 others to exactly 0: its rank counts the logits above it (float64
    oracle), not its place among tied zeros."""
    base = fake([10.0] + [0.0] * 1000)
    logits = torch.cat([torch.tensor([-300.0]), torch.linspace(0.0, -100.0, 500),
                        torch.full((500,), -400.0)])  # fmt: skip
    rows = top_k(fake(logits.tolist()), str, k=2, base=base)
    favourite = next(r for r in rows if r.token_id == 0)
    assert favourite.token_id == 0 and favourite.p == 0.0 and favourite.rank_base == 1
    oracle = int((logits.double() > logits.double()[0]).sum()) + 1
    assert favourite.rank == oracle == 501
    assert [r.rank for r in rows[:2]] == [1, 2]


def test_top_k_needs_logits_and_a_sane_k() -> None:
    with pytest.raises(ValueError, match="no next-token logits"):
        top_k(Trace(tokens=["a"], layers=[], source="t"), str)
    with pytest.raises(ValueError, match="k=0"):
        top_k(fake([1.0, 2.0]), str, k=0)


def test_expanded_error_is_zero_for_a_consistent_gqa_layer_and_not_for_a_broken_one() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()  # [q, k] causal
    k_full = k.repeat_interleave(2, 0)  # [head, k, d]
    logits = (q @ k_full.transpose(-1, -2) * 0.3).masked_fill(~mask, float("-inf"))
    weights = torch.softmax(logits, -1)  # [head, q, k]
    fields = dict(
        q=q, v=v, scores=q @ k_full.transpose(-1, -2), scale=0.3, mask=mask,
        weights=weights, z=weights @ v.repeat_interleave(2, 0), output=torch.zeros(5, 16),
    )  # fmt: skip
    assert expanded_error(LayerTrace(k=k, **fields)) < 1e-6
    wrong = LayerTrace(k=k.flip(0), **fields)  # groups swapped
    assert expanded_error(wrong) > 1e-3
    assert mode(8, 8) == "MHA" and mode(8, 1) == "MQA" and mode(8, 2) == "GQA"
    # Llama-3-8B at float32: 512 MiB
    assert kv_cache_bytes(32, 8, 128, 4096, bytes_per_value=4) == 2 * 32 * 8 * 128 * 4096 * 4
    with pytest.raises(ValueError, match="does not divide"):
        mode(8, 3)
