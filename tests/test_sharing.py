"""MHA / MQA / GQA: the grouping rule and the live checks the sharing page shows."""

import pytest

from attnviz import StackConfig
from attnviz.lessons.sharing import kv_head_of, sharing_check


def test_kv_head_of_follows_torch_enable_gqa() -> None:
    assert kv_head_of(8, 2) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert kv_head_of(8, 8) == list(range(8))
    assert kv_head_of(8, 1) == [0] * 8


@pytest.mark.parametrize("n_kv", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_equivalences_hold(n_kv: int, causal: bool) -> None:
    config = StackConfig(d_model=64, n_heads=8, n_kv_heads=n_kv, causal=causal, seed=3)
    check = sharing_check("The animal didn't cross the street", config)
    assert check.gqa_vs_tied_mha < 1e-5
    assert check.all_groups_vs_mha < 1e-5
    assert check.one_group_vs_mqa < 1e-5


def test_comparison_numbers_shrink_with_sharing() -> None:
    from attnviz.lessons.sharing import comparison

    table = comparison(StackConfig(d_model=512, n_heads=8, n_kv_heads=2), seq_len=1000)
    mha, mqa, gqa = table["MHA"], table["MQA"], table["GQA (G = 2)"]
    assert mha["params"] == 4 * 512 * 512
    assert mha["kv_params"] == 2 * 512 * 512 and mqa["kv_params"] == 2 * 512 * 64
    assert gqa["kv_params"] == 2 * mqa["kv_params"]
    assert mha["cache_bytes"] == 2 * 8 * 64 * 1000 * 2 == 8 * mqa["cache_bytes"]
