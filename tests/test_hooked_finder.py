"""Which head links "it" to "animal"? On the bundled model, real weights."""

import pytest

from attnviz.measures.stats import heads_linking


@pytest.fixture(scope="module")
def trace():
    from attnviz.engine.hooked import load_model, trace_model

    model = load_model(None, device="cpu")
    return trace_model(model, "The animal didn't cross the street because it was too tired")


def test_heads_linking_ranks_by_weight(trace) -> None:
    it, animal = trace.tokens.index("it"), trace.tokens.index("animal")
    top = heads_linking(trace, it, animal, top=5)
    weights = [w for _, _, w in top]
    assert weights == sorted(weights, reverse=True)
    layer, head, best = top[0]
    assert best == pytest.approx(float(trace.layers[layer].weights[head, it, animal]))
    assert best == pytest.approx(float(trace.weights()[:, :, it, animal].max()))
    # Some real head of all-MiniLM links "it" to "animal" far above uniform (1/16).
    assert best > 0.3


def test_heads_linking_rejects_positions_outside_the_sentence(trace) -> None:
    with pytest.raises(ValueError, match="must be positions"):
        heads_linking(trace, 0, 99)
