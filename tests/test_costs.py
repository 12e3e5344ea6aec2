"""Parameter, FLOP and KV-cache counts against note 001's formulas and the paper's Table 3."""

import pytest

from attnviz.lessons.costs import (
    PAPER_VOCAB,
    TABLE3,
    attention_params,
    attention_params_breakdown,
    flops_attention,
    kv_cache_bytes,
    kv_cache_per_token,
    table3_params,
    transformer_params,
    transformer_params_breakdown,
)


@pytest.mark.parametrize("d", [4, 64, 512])
def test_note_001_single_head_is_3_d_squared(d):
    assert attention_params(d, 1, out_proj=False) == 3 * d * d


@pytest.mark.parametrize(("d", "h"), [(4, 2), (512, 8), (768, 12)])
def test_note_001_multi_head_is_4_d_squared(d, h):
    assert attention_params(d, h) == 4 * d * d


def test_breakdown_shapes_gqa_and_biases():
    parts = attention_params_breakdown(64, 8, n_kv_heads=2, bias=True)  # d_k = d_v = 8
    assert parts == {
        "W_Q": 64 * 64, "W_K": 64 * 16, "W_V": 64 * 16, "W_O": 64 * 64,
        "b_Q": 64, "b_K": 16, "b_V": 16, "b_O": 64,
    }  # fmt: skip
    assert attention_params(64, 8, n_kv_heads=2, bias=True) == sum(parts.values())
    assert "W_O" not in attention_params_breakdown(64, 1, out_proj=False, bias=True)
    assert "b_O" not in attention_params_breakdown(64, 1, out_proj=False, bias=True)


def test_mqa_saves_k_and_v_only():
    mha, mqa = attention_params(512, 8), attention_params(512, 8, n_kv_heads=1)
    assert mha - mqa == 2 * 512 * (512 - 64)


def test_transformer_base_by_hand():
    # One encoder layer: 4 projections (512² + 512 each), FFN 2·512·2048 + 2048 + 512, 2 LayerNorms.
    attn = 4 * (512 * 512 + 512)
    ffn = 2 * 512 * 2048 + 2048 + 512
    enc, dec = attn + ffn + 2 * 1024, 2 * attn + ffn + 3 * 1024
    expected = 6 * (enc + dec) + 37000 * 512
    assert transformer_params(512, 8, 2048, 6, 37000) == expected
    parts = transformer_params_breakdown(512, 8, 2048, 6, 37000)
    assert parts["embeddings"] == 37000 * 512  # shared once, not three times
    assert sum(parts.values()) == expected


def _paper_rows():
    return [r for r in TABLE3 if r["paper_params_m"] is not None]


def _label(r):
    keys = ("n_layers", "d_model", "d_ff", "n_heads", "d_k", "d_v")
    return f"{r['row']}:" + ",".join(f"{k}={r[k]}" for k in keys)


# The only Table 3 row the shared-vocabulary count misses by more than 5%: the paper's counts sit
# about 2M above it in every d_model=512 row whatever N is (test below), so the gap lies outside
# the layers, and 2M is 3% of the 65M base but 6.5% of the 36M N=2 model.
LOOSER = {(2, 512, 2048): 0.07}


@pytest.mark.parametrize("row", _paper_rows(), ids=_label)
def test_table3_params_within_5_percent(row):
    calc = table3_params(row) / 1e6
    bound = LOOSER.get((row["n_layers"], row["d_model"], row["d_ff"]), 0.05)
    assert abs(calc - row["paper_params_m"]) <= bound * row["paper_params_m"], calc


def test_table3_gap_does_not_grow_with_layers():
    gaps = [
        r["paper_params_m"] - table3_params(r) / 1e6 for r in _paper_rows() if r["d_model"] == 512
    ]
    assert len(gaps) == 8
    # printed values are rounded to 1M, so a constant gap shows up as a spread of about 1M
    assert max(gaps) - min(gaps) < 1.0, gaps


def test_table3_rows_a_equal_base():
    base = table3_params(TABLE3[0])
    rows_a = [r for r in TABLE3 if r["row"] == "A"]
    assert len(rows_a) == 4
    for r in rows_a:
        assert r["n_heads"] * r["d_k"] == 512
        assert table3_params(r) == base


def test_table3_rows_are_complete():
    assert len(TABLE3) == 15
    assert {r["row"] for r in TABLE3} == {"base", "A", "B", "C", "big"}
    assert TABLE3[0]["paper_params_m"] == 65 and TABLE3[-1]["paper_params_m"] == 213
    assert PAPER_VOCAB == 37000


def test_kv_cache_bytes():
    # Llama-2-7B-like: 32 layers, 32 kv heads of 128, fp16: 0.5 MiB per token
    assert kv_cache_per_token(32, 32, 128) == 2 * 32 * 32 * 128 * 2 == 524288
    assert kv_cache_bytes(32, 32, 128, 4096, batch=2) == 524288 * 4096 * 2
    assert kv_cache_bytes(32, 8, 128, 4096) * 4 == kv_cache_bytes(32, 32, 128, 4096)  # GQA-8
    assert kv_cache_bytes(2, 1, 64, 10, bytes_per_value=0.5) == 1280


def test_h_heads_cost_about_one_full_width_head():
    """Note 004: h heads of width d_model/h cost about one head of width d_model."""
    many = flops_attention(128, 128, 512, n_heads=8, d_head=64)
    one = flops_attention(128, 128, 512, n_heads=1, d_head=512)
    for part in ("projections", "qk", "weights_v", "out_proj"):
        assert many[part] == one[part], part
    assert many["softmax"] == 8 * one["softmax"]  # the only part that grows with h ...
    assert 1 < many["total"] / one["total"] < 1.01  # ... and it is small beside the matmuls
    assert flops_attention(128, 128, 512, 8, 64)["total"] == sum(
        v for k, v in many.items() if k != "total"
    )


def test_flops_counts_by_hand():
    f = flops_attention(n_q=3, n_k=5, d_model=8, n_heads=2, d_head=4, n_kv_heads=1)
    assert f["projections"] == 3 * 8 * 8 + 2 * 5 * 8 * 4
    assert f["qk"] == f["weights_v"] == 2 * 3 * 5 * 4
    assert f["out_proj"] == 3 * 8 * 8


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: attention_params(0, 1), "d_model=0 must be a whole number of at least 1"),
        (lambda: attention_params(64, -2), "n_heads=-2"),
        (lambda: attention_params(64, 6), "n_heads=6 does not divide d_model=64: pick 1, 2, 4"),
        (lambda: attention_params(64, 8, n_kv_heads=3), "n_kv_heads=3 does not divide n_heads=8"),
        (lambda: attention_params(64, 8, d_k=0), "d_k=0"),
        (lambda: transformer_params(512, 8, 0, 6, 37000), "d_ff=0"),
        (lambda: transformer_params(512, 8, 2048, 6, 0), "vocab_size=0"),
        (lambda: kv_cache_bytes(0, 8, 64, 10), "n_layers=0"),
        (lambda: kv_cache_bytes(2, 8, 64, -1), "seq_len=-1"),
        (lambda: kv_cache_bytes(2, 8, 64, 10, bytes_per_value=0), "bytes_per_value=0"),
        (lambda: flops_attention(0, 4, 64, 8, 8), "n_q=0"),
        (lambda: flops_attention(4, 4, 64, 8, 8, n_kv_heads=5), "n_kv_heads=5"),
    ],
)
def test_bad_sizes_raise_with_the_rule(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call()


def test_d_k_given_lifts_the_divisibility_rule():
    assert attention_params(64, 6, d_k=8, d_v=8) == 3 * 64 * 48 + 48 * 64


def test_multihead_shapes_follow_note_000() -> None:
    from attnviz.lessons.costs import multihead_shapes

    rows = {r["stage"]: r["shape"] for r in multihead_shapes(4, 512, 8)}
    assert rows["W_q^i"] == "512 × 64"
    assert rows["Q_i K_jᵀ / √d_k"] == "4 × 4"
    assert rows["Concat(head_1..head_h)"] == "4 × 512"
    assert rows["Concat · W_O"] == "4 × 512"
    gqa = {r["stage"]: r["formula"] for r in multihead_shapes(4, 512, 8, n_kv_heads=2)}
    assert gqa["W_k^j, W_v^j"].endswith(", 2")
