"""A loaded model's float32 Linear layers on the CPU go through oneDNN's matmul (faster than MKL's
sgemm on AMD processors): float32 results, each row's bits independent of the batch, the graph
path and other dtypes left to F.linear, and ATTNVIZ_ONEDNN_LINEAR=0 keeping MKL. The traces
against Hugging Face's eager model (whose layers stay plain nn.Linear) are in test_hooked.py,
test_decoder_batches.py and test_llms.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnviz.engine.hooked import onednn
from attnviz.engine.hooked.onednn import OneDNNLinear, exact, rows_alike, use_onednn

if not exact():
    pytest.skip(
        "this torch build has no float32 oneDNN linear on this processor: F.linear is used",
        allow_module_level=True,
    )

SHAPES = [(576, 576), (1536, 576), (576, 1536), (192, 576), (384, 1536)]  # SmolLM2's, MiniLM's


@pytest.mark.parametrize(("n_out", "n_in"), SHAPES)
def test_the_product_is_float32_and_each_row_is_the_same_alone_or_in_any_batch(n_out, n_in):
    gen = torch.Generator().manual_seed(n_out + n_in)
    x = torch.randn(3, 45, n_in, generator=gen)
    w, b = torch.randn(n_out, n_in, generator=gen), torch.randn(n_out, generator=gen)
    full = rows_alike(x, w, b)
    want = F.linear(x.double(), w.double(), b.double())
    assert (full.double() - want).abs().max() < 2e-6 * n_in**0.5 * 30  # float32's rounding
    for i, j in [(0, 0), (1, 17), (2, 44)]:  # one row: M = 1 would take another kernel
        assert torch.equal(rows_alike(x[i, j], w, b), full[i, j])
        assert torch.equal(rows_alike(x[i : i + 1, j : j + 1], w, b)[0, 0], full[i, j])
    for m in (2, 3, 7, 64, 100):
        assert torch.equal(rows_alike(x.reshape(-1, n_in)[:m], w, b), full.reshape(-1, n_out)[:m])
    strided = x[:, -1:]  # a decoder's last positions: a strided view
    assert torch.equal(rows_alike(strided, w, b), full[:, -1:])


def test_no_bfloat16_rounding():
    """1 + 2^-10 rounds to 1 in bfloat16: summed 576 times it must come back as 576.5625."""
    layer = OneDNNLinear(576, 4, bias=False)
    torch.nn.init.ones_(layer.weight)
    with torch.no_grad():
        out = layer(torch.full((5, 576), 1 + 2**-10))
    assert torch.equal(out, torch.full((5, 4), 576.5625))


def test_a_gradient_or_another_dtype_takes_f_linear(monkeypatch):
    calls = []
    monkeypatch.setattr(onednn, "rows_alike", lambda *a: calls.append(1) or F.linear(*a))
    layer = OneDNNLinear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    layer(x).sum().backward()  # the graph: F.linear, whose backward exists
    assert x.grad is not None and layer.weight.grad is not None and not calls
    with torch.no_grad():
        layer(x)
    assert calls == [1]
    layer.to(torch.bfloat16)
    with torch.no_grad():
        assert layer(x.detach().bfloat16()).dtype is torch.bfloat16
    assert calls == [1]


def test_loading_switches_the_linear_layers_and_the_switch_turns_it_off(monkeypatch):
    def model():
        return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

    on = model()
    assert use_onednn(on) == 2 and isinstance(on[0], OneDNNLinear)
    assert isinstance(on[0], torch.nn.Linear)  # what isinstance checks elsewhere still see
    monkeypatch.setenv("ATTNVIZ_ONEDNN_LINEAR", "0")
    off = model()
    assert use_onednn(off) == 0 and type(off[0]) is torch.nn.Linear


def test_a_loaded_model_runs_its_linear_layers_through_onednn(monkeypatch):
    import attnviz

    model = attnviz.load_model(None, device="cpu")  # the bundled MiniLM
    layers = [m for m in model.model.modules() if isinstance(m, torch.nn.Linear)]
    assert layers and all(type(m) is OneDNNLinear for m in layers)
    calls = []
    real = onednn.rows_alike
    monkeypatch.setattr(onednn, "rows_alike", lambda *a: calls.append(1) or real(*a))
    trace = attnviz.trace_model(model, "the cat sat on the mat")
    assert len(calls) >= len(layers) - 1  # the pooler may not run
    assert torch.allclose(trace.layers[0].weights.sum(-1), torch.ones(()), atol=1e-5)


def test_a_strided_input_in_another_dtype_reaches_f_linear_contiguous(monkeypatch):
    """A decoder's last positions `hidden[:, -1:]` (logits_to_keep=1) in bfloat16: F.linear would
    multiply the strided view as a batched matmul, copying the weight once per sentence."""
    seen = []
    real = F.linear
    monkeypatch.setattr(F, "linear", lambda x, *a: seen.append(x.is_contiguous()) or real(x, *a))
    layer = OneDNNLinear(16, 40).to(torch.bfloat16)
    hidden = torch.randn(4, 6, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        got = layer(hidden[:, -1:])
    assert seen == [True]
    assert torch.equal(got, real(hidden[:, -1:].contiguous(), layer.weight, layer.bias))


@pytest.mark.skipif(not onednn.can_pack(), reason="this build cannot reorder a linear weight")
@pytest.mark.parametrize(("n_out", "n_in"), SHAPES)
def test_a_packed_weight_gives_the_same_bits_at_any_number_of_rows(n_out, n_in):
    gen = torch.Generator().manual_seed(7 * n_out + n_in)
    layer = OneDNNLinear(n_in, n_out)
    layer.packs = True
    x = torch.randn(130, n_in, generator=gen)
    with torch.no_grad():
        for m in (1, 2, 3, 31, 32, 33, 130):
            assert torch.equal(layer(x[:m]), rows_alike(x[:m], layer.weight, layer.bias))
    assert layer.packed().is_mkldnn  # the blocked copy is what ran


@pytest.mark.skipif(not onednn.can_pack(), reason="this build cannot reorder a linear weight")
def test_the_packed_weight_follows_the_weight_and_is_never_saved_or_pickled():
    import pickle

    layer = OneDNNLinear(32, 64)
    layer.packs = True
    x = torch.randn(4, 32)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2)  # written in place: packed again
        assert torch.equal(layer(x), rows_alike(x, layer.weight, layer.bias))
        assert not torch.equal(layer(x), before)
        layer.weight = torch.nn.Parameter(torch.randn(64, 32))  # another tensor
        assert torch.equal(layer(x), rows_alike(x, layer.weight, layer.bias))
    assert set(layer.state_dict()) == {"weight", "bias"}
    again = pickle.loads(pickle.dumps(layer))
    assert "_packed" not in again.__dict__
    with torch.no_grad():
        assert torch.equal(again(x), layer(x))


def test_only_a_model_within_the_budget_keeps_packed_weights(monkeypatch):
    def model():  # 2 x 256 x 256 float32 weights: 0.5 MB
        return torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))

    small = model()
    use_onednn(small)
    assert all(m.packs for m in small) == onednn.can_pack()
    monkeypatch.setenv("ATTNVIZ_PACKED_LINEAR_MB", "0")
    off = model()
    use_onednn(off)
    assert not any(m.packs for m in off)
    monkeypatch.setattr(onednn, "PACKED_MB", 1)  # the default budget: 1 MB
    monkeypatch.delenv("ATTNVIZ_PACKED_LINEAR_MB")
    tied = model()
    tied[1].weight = tied[0].weight  # one weight, counted once: 0.25 MB
    use_onednn(tied)
    assert all(m.packs for m in tied) == onednn.can_pack()
    big = torch.nn.Sequential(torch.nn.Linear(1024, 512))  # 2 MB
    use_onednn(big)
    assert not big[0].packs
