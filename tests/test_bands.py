"""attnviz.engine.bands: one pass over a lean layer gives the pooled map and the head statistics,
equal to the same quantities computed from the whole recomputed [head, q, k] weights, for every
kind of mask rule (bidirectional, causal, sliding window, hidden keys, a query offset), GQA, and
bands that cut through output bins."""

from __future__ import annotations

import math

import pytest
import torch

from attnviz.engine import bands
from attnviz.engine.lean import MaskRule, attend_lean, lean_scores, lean_weights
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.measures.stats import head_stats, layer_saturation

RULES = {
    "bidirectional": dict(causal=False),
    "causal": dict(causal=True),
    "window": dict(causal=True, window=17),
    "hidden keys": dict(causal=False, keys=[3, 40, 41]),
    "causal, hidden, offset": dict(causal=True, keys=[0, 7], q_offset=5),
}


def lean_layer(n_q: int, n_k: int, rule_args: dict, heads=6, kv=2, d=8, seed=0) -> LayerTrace:
    """A lean layer of random q, k, v under a mask rule (its lse from attend_lean)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, n_q, d, generator=g) * 2  # [b, head, q, d]
    k = torch.randn(1, kv, n_k, d, generator=g) * 2  # [b, kv, k, d]
    v = torch.randn(1, kv, n_k, d, generator=g)  # [b, kv, k, d]
    args = dict(rule_args)
    if "keys" in args:
        keys = torch.ones(n_k, dtype=torch.bool)
        keys[args["keys"]] = False
        args["keys"] = keys
    rule = MaskRule(n_q, n_k, **args)
    scale = 1 / math.sqrt(d)
    z, lse = attend_lean(q, k, v, rule, scale)
    return LayerTrace(
        q=q[0], k=k[0], v=v[0], scale=scale, z=z[0], output=torch.zeros(n_q, 4),
        scores=lean_scores, weights=lean_weights, mask=rule, lse=lse[0],
    )  # fmt: skip


def full_copy(layer: LayerTrace) -> LayerTrace:
    """The same layer with its whole weights and mask stored (the oracle)."""
    return LayerTrace(
        q=layer.q, k=layer.k, v=layer.v, scale=layer.scale, z=layer.z, output=layer.output,
        scores=layer.scores, weights=layer.weights, mask=layer.mask,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(RULES))
def test_allowed_counts_are_the_rules_row_sums(name) -> None:
    args = dict(RULES[name])
    if "keys" in args:
        keys = torch.ones(60, dtype=torch.bool)
        keys[args["keys"]] = False
        args["keys"] = keys
    rule = MaskRule(50, 60, **args)
    rows = torch.arange(50)
    assert torch.equal(bands.allowed_counts(rule, rows), rule().sum(-1))


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("side", [(7, 9), (50, 60), (13, 64)])
def test_pooled_map_equals_adaptive_pooling_of_the_whole_weights(monkeypatch, name, side) -> None:
    monkeypatch.setattr(bands, "BAND_CELLS", 6 * 60 * 5)  # 16-row bands cut through the bins
    layer = lean_layer(50, 60, RULES[name])
    got = bands.summarize(layer, side).pooled  # [head, th, tw]
    want = torch.nn.functional.adaptive_avg_pool2d(
        layer.weights, (min(side[0], 50), min(side[1], 60))
    )
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(RULES))
def test_statistics_of_one_pass_equal_those_of_the_whole_weights(monkeypatch, name) -> None:
    monkeypatch.setattr(bands, "BAND_CELLS", 6 * 60 * 5)
    layers = [lean_layer(50, 60, RULES[name], seed=s) for s in range(2)]
    tokens = [f"t{i}" for i in range(50)]
    keys = [f"t{i}" for i in range(60)]
    special = {"[CLS]": [0], "[SEP]": [44]}
    lean = Trace(tokens=tokens, key_tokens=keys, layers=layers, source="t", special=special)
    copies = [full_copy(la) for la in layers]
    full = Trace(tokens=tokens, key_tokens=keys, layers=copies, source="t", special=special)
    got, want = head_stats(lean), head_stats(full)
    for stat in want:
        torch.testing.assert_close(got[stat], want[stat], atol=2e-5, rtol=1e-5, msg=stat)
    top, entropy = layer_saturation(layers[1])
    w, ok = layers[1].weights, layers[1].mask  # [head, q, k], [q, k]
    plogp = torch.where(w > 0, w * w.clamp_min(1e-30).log(), torch.zeros(()))
    assert top == pytest.approx(float(w.amax(-1).mean()), abs=1e-6)
    assert entropy == pytest.approx(float(-plogp.sum(-1).mean()), abs=1e-5)
    assert ok.shape == (50, 60)


def test_one_pass_serves_both_and_is_memoized(monkeypatch) -> None:
    layer = lean_layer(40, 40, RULES["causal"])
    calls = []
    real = bands._summarize
    monkeypatch.setattr(bands, "_summarize", lambda *a: calls.append(a) or real(*a))
    first = bands.summarize(layer, (bands.THUMB, bands.THUMB), ())
    assert bands.summarize(layer, None) is first  # the statistics come with the map
    assert bands.summarize(layer, (bands.THUMB, bands.THUMB), ()) is first
    assert len(calls) == 1
    bands.summarize(layer, (8, 8), ())
    assert len(calls) == 2


def test_weight_shift_of_lean_traces_equals_the_whole_weights_one(monkeypatch) -> None:
    """The what-if's shift per head, a block of rows at a time, equals it from the whole maps."""
    from attnviz.engine import lean
    from attnviz.measures.stats import weight_shift

    monkeypatch.setattr(lean, "BLOCK_CELLS", 60 * 7)  # 7-row blocks
    tokens = [f"t{i}" for i in range(50)]

    def pair(seed: int) -> tuple[Trace, Trace]:
        layers = [lean_layer(50, 50, RULES["window"], seed=seed + s) for s in range(2)]
        copies = [full_copy(la) for la in layers]
        return Trace(tokens=tokens, layers=layers, source="t"), Trace(
            tokens=tokens, layers=copies, source="t"
        )

    (a, a_full), (b, b_full) = pair(0), pair(10)
    want = weight_shift(a_full, b_full)  # [layer, head]
    assert float(want.min()) > 0.05
    torch.testing.assert_close(weight_shift(a, b), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["causal", "window", "hidden keys"])
def test_statistics_of_moved_in_one_pass_equal_the_dense_ones(name, monkeypatch) -> None:
    """The pass of the statistics of moved (the band's w·f summed, never divided) equals the dense
    statistics of moved's rows as shares, with a head that moves nothing (silenced: norms 0) and
    keys that send nothing."""
    monkeypatch.setattr(bands, "BAND_CELLS", 6 * 50 * 9)  # 9-row bands
    norms = torch.rand(6, 50, generator=torch.Generator().manual_seed(3)) * 3  # [head, k]
    norms[2] = 0.0
    norms[:, [4, 30]] = 0.0
    lean = lean_layer(50, 50, RULES[name], seed=7)
    full = full_copy(lean)
    lean.f_norm = full.f_norm = norms
    tokens, special = [f"t{i}" for i in range(50)], {"[CLS]": [0, 11]}
    want = head_stats(Trace(tokens=tokens, layers=[full], source="t", special=special), "moved")
    got = head_stats(Trace(tokens=tokens, layers=[lean], source="t", special=special), "moved")
    for stat in want:
        torch.testing.assert_close(got[stat], want[stat], atol=2e-5, rtol=1e-4)
    assert float(want["max_weight"][0, 2]) == 0.0  # the silenced head moves nothing


def test_a_made_summary_comes_back_while_moveds_pass_runs_on_the_layer(monkeypatch) -> None:
    """The server warms the statistics of moved right after the overview's pass: the overview
    must not wait for that pass to read the weights' summary it has already."""
    import threading

    layer = lean_layer(40, 40, RULES["causal"])
    layer.f_norm = torch.rand(6, 40) + 0.5  # [head, k]
    side = (bands.THUMB, bands.THUMB)
    made = bands.summarize(layer, side, ())
    gate, started = threading.Event(), threading.Event()
    real = bands._summarize

    def held(*args, **kw):
        started.set()
        gate.wait(30)
        return real(*args, **kw)

    monkeypatch.setattr(bands, "_summarize", held)
    moved = threading.Thread(target=bands.summarize_moved, args=(layer, ()))
    moved.start()
    try:
        assert started.wait(30)
        got = []
        reader = threading.Thread(target=lambda: got.append(bands.summarize(layer, side, ())))
        reader.start()
        reader.join(5)  # at once, not after moved's pass (held until the gate opens)
        assert got and got[0] is made, "the weights' summary waited for moved's pass"
    finally:
        gate.set()
        moved.join(30)
    assert bands.made(layer, bands.MOVED, ())


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_kind_of_layer_answers_the_same_reads(name) -> None:
    """A lean layer and its full copy are both LayerTraces and give a reader the same answers
    (drawn maps, pooled maps, allowed keys, the keys a band may see) without it asking which
    kind it holds."""
    from attnviz.measures.words import grouped

    lean = lean_layer(40, 48, RULES[name])
    full = full_copy(lean)
    assert isinstance(lean, LayerTrace) and isinstance(full, LayerTrace)
    assert (lean.holds_maps, lean.in_bands, full.holds_maps, full.in_bands) == (
        False, True, True, False,
    )  # fmt: skip
    assert torch.equal(lean.allowed(), full.allowed())
    lo, hi = lean.key_span(10, 20)
    assert not lean.block("mask", 0, slice(10, 20))[:, :lo].any()
    assert not lean.block("mask", 0, slice(10, 20))[:, hi:].any()
    assert full.key_span(10, 20) == (0, 48)
    for h in (0, 5):
        torch.testing.assert_close(lean.head_map("weights", h, 16),
                                   torch.nn.functional.adaptive_avg_pool2d(
                                       full.head_map("weights", h, 16)[None], (16, 16))[0],
                                   atol=1e-6, rtol=1e-4)  # fmt: skip
    torch.testing.assert_close(lean.pooled(8, 8), full.pooled(8, 8), atol=1e-6, rtol=1e-4)
    tokens = [f"t{i}" for i in range(48)]
    words = [grouped(Trace(tokens=tokens[:40], key_tokens=tokens, layers=[la], source="t"))
             for la in (lean, full)]  # fmt: skip
    a, b = words[0].layers[0], words[1].layers[0]
    assert isinstance(a, LayerTrace) and not a.holds_maps and b.holds_maps
    assert a.has("weights") and not a.has("scores") and words[0].unit == "word"
    torch.testing.assert_close(a.block("weights", 2), b.block("weights", 2), atol=1e-6, rtol=1e-4)
