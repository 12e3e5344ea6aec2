"""Exports: the JSON carries sentence, model/config and knobs, stays small; the .npz
holds every tensor exactly."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from attnviz import StackConfig, load_model, trace_model, trace_text
from attnviz.views import export

TEXT = "The animal didn't cross the street because it was too tired"


@pytest.fixture(scope="module")
def bert_trace():
    return trace_model(load_model(), TEXT, temperature=0.5, ablate={(5, 11)}, mask_tokens=(3,))


def test_bert_json_has_the_sentence_the_model_every_knob_and_is_small(bert_trace) -> None:
    text = export.to_json(bert_trace, TEXT)
    data = json.loads(text)
    assert data["text"] == TEXT and data["tokens"] == bert_trace.tokens
    k = data["knobs"]
    assert k["kind"] == "pretrained" and "MiniLM" in k["model"]
    assert k["temperature"] == 0.5 and k["ablate"] == [[5, 11]] and k["mask_tokens"] == [3]
    assert k["use_scale"] is True
    assert "3 decimals" in data["precision"]
    n = len(bert_trace.tokens)  # 15
    size = len(text.encode())
    # the old export was 4.3 MB for these 15 tokens
    assert size < 150_000, size
    assert abs(size - export.json_bytes(bert_trace)) / size < 0.05  # masked cells: "null,"
    w = np.array(data["layers"][2]["weights"], dtype=float)  # [head, q, k], masked: null
    want = bert_trace.layers[2].weights.numpy()
    assert np.isnan(w[:, :, 3]).all()  # the hidden token: masked, not a weight of 0
    assert np.nanmax(np.abs(w - want)) <= 5e-4 + 1e-7
    assert data["layers"][0]["mask"] == {"causal": False, "keys": [3]} and n == 15


def test_the_counted_characters_of_weights_are_what_json_writes() -> None:
    """_number_bytes counts weights by value (a table of each thousandth's characters): the
    characters JSON writes for them rounded to thousandths, for weights with trailing zeros (0.1,
    0.12, 0.0, 1.0) and any other; a value outside 0..1 (no weight) is counted the slow way."""
    gen = torch.Generator().manual_seed(0)
    weights = torch.cat([
        torch.softmax(torch.randn(6, 9, 9, generator=gen) * 3, -1).flatten(),
        torch.tensor([0.0, 1.0, 0.1, 0.12, 0.1004, 0.0996, 0.5, 0.05, 0.0004]),
    ])  # fmt: skip

    def written(values: torch.Tensor) -> int:
        thousandths = torch.round(values.float() * 1000).long().tolist()
        return len(",".join(json.dumps(v / 1000) for v in thousandths) + ",")

    assert export._number_bytes(weights) == written(weights)
    signed = torch.tensor([-0.5, 0.25, 2.0, -0.001, 0.1])
    assert export._number_bytes(signed) == written(signed) - 2  # minus signs are not counted
    assert export._number_bytes(torch.zeros(0)) == 0


def test_a_long_trace_s_json_keeps_the_larger_weights_under_ten_megabytes() -> None:
    """At 512 tokens every weight is 113 MB of JSON (93 MB measured by the audit): the default
    keeps each head's weights above the smallest threshold that fits 10 MB, and says its size
    before building it."""
    config = StackConfig(d_model=96, n_heads=12, n_layers=6, causal=True, seed=0)
    trace = trace_text(" ".join(["the cat sat on the mat"] * 86), config)  # 516 -> 512 tokens
    assert len(trace.tokens) == 512
    pick = export.default_pick(trace)
    assert pick.threshold > 0
    said = export.json_bytes(trace, pick)
    text = export.to_json(trace, TEXT, pick=pick)
    assert len(text.encode()) <= export.MOST_BYTES and abs(len(text.encode()) - said) / said < 0.02
    data = json.loads(text)
    layer = data["layers"][4]
    assert layer["mask"] == {"causal": True, "keys": []}
    head = layer["sparse"][7]
    w = trace.layers[4].weights[7]
    kept = w >= pick.threshold
    assert len(head["w"]) == int(kept.sum())  # every weight at or above it, nothing else
    np.testing.assert_allclose(head["w"], w[kept].numpy(), atol=5e-4 + 1e-7)
    assert all(k <= q for q, k in zip(head["q"], head["k"], strict=True))  # nothing masked
    small = export.Pick(layers=(1,), heads=(0, 3))
    data = json.loads(export.to_json(trace, TEXT, pick=small))
    assert [la["layer"] for la in data["layers"]] == [1] and data["layers"][0]["heads"] == [0, 3]


def test_stack_json_carries_the_config_and_a_big_playground_stays_small() -> None:
    config = StackConfig(d_model=256, n_heads=32, d_head=128, n_layers=6, causal=True)
    trace = trace_text(TEXT, config)
    data = json.loads(export.to_json(trace, TEXT))
    assert data["knobs"] == {"kind": "stack", "config": data["knobs"]["config"]}
    assert data["knobs"]["config"]["n_heads"] == 32 and data["knobs"]["config"]["causal"] is True
    size = len(export.to_json(trace, TEXT).encode())
    assert size < 1_500_000, size  # the old export: 101 MB


def test_npz_holds_every_tensor_at_float32(bert_trace) -> None:
    blob = export.to_npz(bert_trace, TEXT)
    arrays = np.load(io.BytesIO(blob))
    for i, lt in enumerate(bert_trace.layers):
        for name in export.TENSORS:
            assert np.array_equal(arrays[f"L{i}.{name}"], getattr(lt, name).numpy()), (i, name)
    assert np.array_equal(arrays["embedding"], bert_trace.embedding.numpy())
    meta = json.loads(str(arrays["meta"]))
    assert meta["text"] == TEXT and meta["knobs"]["ablate"] == [[5, 11]]
    assert torch.is_tensor(bert_trace.hidden)


def test_slug_names_files_safely() -> None:
    assert export.slug("sentence-transformers/all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert export.slug("/tmp/my model/") == "my-model"
    assert export.slug("") == "trace"
