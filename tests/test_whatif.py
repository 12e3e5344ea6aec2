"""attnviz.measures.whatif on the bundled model: what silencing a head moves and what it cannot."""

from __future__ import annotations

import pytest
import torch

from attnviz import load_model, trace_model
from attnviz.measures.whatif import compare, head_ids, parse_head_ids

TEXT = "The animal didn't cross the street because it was too tired"


@pytest.fixture(scope="module")
def model():
    return load_model()


def test_head_ids_round_trip_and_bad_ids_are_named() -> None:
    ids = head_ids(2, 3)
    assert ids == ["L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"]
    assert parse_head_ids(ids)[-1] == (1, 2)
    with pytest.raises(ValueError, match="L5H"):
        parse_head_ids(["5:11"])


def test_silencing_moves_only_later_layers_and_the_outputs(model) -> None:
    base = trace_model(model, TEXT)
    new = trace_model(model, TEXT, ablate={(3, 1)})
    change = compare(new, base)
    assert change.silenced == ((3, 1),)
    assert torch.all(change.shift[:4] == 0)  # layers 0..3 see the same input
    assert change.first_moved_layer == 4
    assert change.heads_moved > 0 and not change.silenced_only_later
    assert torch.all(change.layer_change[:3] == 0) and bool((change.layer_change[3] > 0).all())
    assert change.cosine < 1.0 and float(change.token_change.max()) > 0
    # oracle for the token change: the hidden states themselves
    rel = (new.hidden - base.hidden).norm(dim=-1) / base.hidden.norm(dim=-1)
    torch.testing.assert_close(change.token_change, rel)


def test_silencing_the_last_layer_moves_no_weight_but_the_output(model) -> None:
    base = trace_model(model, TEXT)
    change = compare(trace_model(model, TEXT, ablate={(5, 11)}), base)
    assert change.heads_moved == 0 and change.first_moved_layer is None
    assert change.silenced_only_later
    assert float(change.token_change.max()) > 1e-3 and change.cosine < 1.0


def test_compare_refuses_traces_of_other_tokens(model) -> None:
    with pytest.raises(ValueError, match="same tokens"):
        compare(trace_model(model, "a b"), trace_model(model, "a c"))
