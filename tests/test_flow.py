"""attnviz.flow_graph (information-flow routes, Ferrando & Voita 2024) against an oracle written
here: Hugging Face's eager model read with its own hooks (each layer's input and output, the
state after attention, the values, the attention weights), each head's part from each key made
by hand (α_ij · v_j W_O^h), the L1 proximities max(‖y‖₁ − ‖y − c‖₁, 0) normalised over the
node. Tiny random GQA Llama, GPT-2 (biases everywhere) and Gemma 3 (a norm after attention)."""

from __future__ import annotations

import pytest
import torch

import attnviz
import attnviz.engine.budget as budget_module
from attnviz.engine.hooked import load_model, trace_model
from attnviz.engine.layer import LeanLayer
from attnviz.measures.flow import flow_graph, node_parts, prune
from tests.writes_models import eager_inputs, gemma3_family, get, make_pair

TEXT = "the cat sat on the mat and then it slept"
# where the oracle reads: the layers, the module whose input is the state after attention, the
# value projection, W_O
PATHS = {
    "llama": ("model.layers", "post_attention_layernorm", "self_attn.v_proj", "self_attn.o_proj"),
    "gpt2": ("transformer.h", "ln_2", "attn.c_attn", "attn.c_proj"),
    "gemma3_text": (
        "model.layers",
        "pre_feedforward_layernorm",
        "self_attn.v_proj",
        "self_attn.o_proj",
    ),
}


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma3_text"])
def pair(request, tmp_path_factory):
    with gemma3_family():
        yield make_pair(request.param, tmp_path_factory)


def eager_run(pair) -> dict:
    """Per layer: its input x, the state after attention mid, its output, the values [n, ...],
    the attention weights [head, n, n], from the eager model and hooks written here."""
    layers_path, mid_path, v_path, _ = PATHS[pair.family]
    layers = get(pair.eager, layers_path)
    got: dict = {}
    hooks = []
    for i, layer in enumerate(layers):

        def io(m, args, kwargs, out, i=i):
            x = args[0] if args else kwargs["hidden_states"]
            got[("x", i)] = x[0].double()
            got[("out", i)] = (out[0] if isinstance(out, tuple) else out)[0].double()

        def mid(m, args, i=i):
            got[("mid", i)] = args[0][0].double()

        def value(m, args, out, i=i):
            got[("v", i)] = out[0].double()

        hooks += [layer.register_forward_hook(io, with_kwargs=True)]
        hooks += [get(layer, mid_path).register_forward_pre_hook(mid)]
        hooks += [get(layer, v_path).register_forward_hook(value)]
    with torch.inference_mode():
        res = pair.eager(**eager_inputs(pair, TEXT), output_attentions=True)
    for h in hooks:
        h.remove()
    for i, w in enumerate(res.attentions):
        got[("w", i)] = w[0].double()  # [head, n, n]
    return got


def head_parts(pair, got: dict, i: int, pos: int) -> dict:
    """{(kind, src_pos, head): part vector} of node (i, mid, pos), by hand."""
    layer = get(pair.eager, PATHS[pair.family][0])[i]
    w_o = get(layer, PATHS[pair.family][3])
    cfg = pair.eager.config
    n_heads = cfg.num_attention_heads
    d = cfg.hidden_size
    if pair.family == "gpt2":
        v = got[("v", i)][:, 2 * d :]  # c_attn's output: q | k | v
        n_kv, d_head = n_heads, d // n_heads
        w = w_o.weight.double()  # Conv1D: [in, out]
    else:
        n_kv, d_head = cfg.num_key_value_heads, cfg.head_dim
        v = got[("v", i)]
        w = w_o.weight.double().T  # [head * d_head, d_model]
    v = v.reshape(v.shape[0], n_kv, d_head)  # [n, kv, d_head]
    alpha = got[("w", i)][:, pos]  # [head, n]
    norm = (
        getattr(layer, "post_attention_layernorm", None) if pair.family == "gemma3_text" else None
    )
    if norm is not None:  # Gemma 3: the norm after attention, frozen at this position's output
        raw = sum(
            alpha[h, j] * v[j, h // (n_heads // n_kv)] @ w[h * d_head : (h + 1) * d_head]
            for h in range(n_heads)
            for j in range(v.shape[0])
        )
        s = (raw.pow(2).mean() + norm.eps).sqrt()
        scale = (1 + norm.weight.double()) / s
    else:
        scale = 1.0
    parts = {("residual", pos, None): got[("x", i)][pos]}
    for h in range(n_heads):
        wh = w[h * d_head : (h + 1) * d_head]  # [d_head, d_model]
        for j in range(pos + 1):
            parts[("head", j, h)] = alpha[h, j] * (v[j, h // (n_heads // n_kv)] @ wh) * scale
    if w_o.bias is not None:
        parts[("bias", None, None)] = w_o.bias.double() * scale
    return parts


def shares(parts: dict, y: torch.Tensor) -> dict:
    prox = {k: max(float(y.abs().sum() - (y - c).abs().sum()), 0.0) for k, c in parts.items()}
    total = sum(prox.values())
    return {k: p / total for k, p in prox.items()}


def rows_of(graph, layer: int, stage: str, pos: int) -> dict:
    rows = graph[(graph.dst_layer == layer) & (graph.dst_stage == stage) & (graph.dst_pos == pos)]
    return {
        (
            r.kind,
            None if r.kind == "bias" else int(r.src_pos),
            None if r.kind != "head" else int(r.head),
        ): r
        for r in rows.itertuples(index=False)
    }


def same_shares(found: dict, want: dict) -> None:
    assert sum(want.values()) == pytest.approx(1.0)
    for key, share in want.items():
        if key in found:
            assert found[key].share == pytest.approx(share, abs=2e-4), key
        else:  # not in the graph: nothing to keep (a share of 0)
            assert share < 1e-5, key
    assert set(found) <= set(want)


def test_proximities_match_an_oracle_written_here(pair):
    got = eager_run(pair)
    trace = trace_model(pair.model, TEXT)
    n = len(trace.tokens)
    last = len(get(pair.eager, PATHS[pair.family][0])) - 1
    graph = flow_graph(pair.model, trace, threshold=0.0)
    # the last layer's output node: the residual (its state after attention) and the MLP
    y, mid = got[("out", last)][-1], got[("mid", last)][-1]
    want = shares({("residual", n - 1, None): mid, ("mlp", n - 1, None): y - mid}, y)
    same_shares(rows_of(graph, last, "out", n - 1), want)
    # a mid node: every head's part from every key, the residual and the bias
    for layer in (last, 0):
        want = shares(head_parts(pair, got, layer, n - 1), got[("mid", layer)][-1])
        found = rows_of(graph, layer, "mid", n - 1)
        assert any(k[0] == "head" for k in found)
        same_shares(found, want)


def test_a_nodes_parts_add_up_to_its_state(pair):
    got = eager_run(pair)
    trace = trace_model(pair.model, TEXT)
    for layer, pos in ((0, -1), (1, 3)):
        state, sources, parts = node_parts(pair.model, trace, layer, pos, "mid")
        assert len(sources) == len(parts)
        assert torch.allclose(state.double(), got[("mid", layer)][pos], atol=1e-4)
        assert torch.allclose(parts.sum(0).double(), got[("mid", layer)][pos], atol=1e-4)
    state, sources, parts = node_parts(pair.model, trace, 1, -1, "out")
    assert [s[3] for s in sources] == ["residual", "mlp"]
    assert torch.allclose(parts.sum(0).double(), got[("out", 1)][-1], atol=1e-4)


def test_threshold_keeps_parts_above_it_renormalised_and_reachable(pair):
    trace = trace_model(pair.model, TEXT)
    everything = flow_graph(pair.model, trace, threshold=0.0)
    n = len(trace.tokens)
    previous = None
    for tau in (0.04, 0.1, 0.3):
        graph = flow_graph(pair.model, trace, threshold=tau)
        assert (graph.share > tau).all()
        by_node = graph.groupby(["dst_layer", "dst_stage", "dst_pos"])
        assert by_node.weight.sum().to_numpy() == pytest.approx(1.0, abs=1e-5)
        scaled = graph.share / by_node.share.transform("sum")
        assert graph.weight.to_numpy() == pytest.approx(scaled.to_numpy(), abs=1e-6)
        # the same shares as the whole graph's: the threshold drops parts, it changes no share
        key = ["dst_layer", "dst_stage", "dst_pos", "kind", "src_pos", "head"]
        merged = graph.merge(everything, on=key, suffixes=("", "_all"), how="left")
        assert merged.share_all.to_numpy() == pytest.approx(merged.share.to_numpy(), abs=1e-6)
        # reachable: each node built is the output node or the source of a kept edge
        top = (graph.attrs["n_layers"] - 1, "out", n - 1)
        built = set(by_node.groups)
        edges = graph[graph.kind != "bias"]  # a bias has no source node
        sources = {
            (int(a), s, int(p))
            for a, s, p in zip(edges.src_layer, edges.src_stage, edges.src_pos, strict=True)
        }
        assert top in built
        assert built - {top} <= sources
        nodes = built | sources
        if previous is not None:
            assert nodes <= previous  # a higher threshold: fewer nodes
        previous = nodes


def test_a_lean_trace_gives_the_same_graph(pair, monkeypatch):
    full = flow_graph(pair.model, trace_model(pair.model, TEXT), threshold=0.0)
    monkeypatch.setenv("ATTNVIZ_FULL_TRACE_BYTES", "1")
    budget_module.budget.cache_clear()
    try:
        trace = trace_model(pair.model, TEXT)
        assert trace.layers[0].in_bands
        lean = flow_graph(pair.model, trace, threshold=0.0)
        # at a threshold that reaches few positions: only their weight rows are read, never a
        # head's whole n x n map
        asked: list = []
        block = LeanLayer.block

        def spy(self, name, h, rows=None, cols=None):
            asked.append((name, None if rows is None else len(rows), cols))
            return block(self, name, h, rows, cols)

        monkeypatch.setattr(LeanLayer, "block", spy)
        few = flow_graph(pair.model, trace, threshold=0.3)
        mids = few[few.dst_stage == "mid"].groupby("dst_layer").dst_pos.nunique()
        assert asked and all(rows is not None and cols is None for _, rows, cols in asked)
        assert max(rows for _, rows, _ in asked) == mids.max() < len(trace.tokens)
    finally:
        monkeypatch.delenv("ATTNVIZ_FULL_TRACE_BYTES")
        budget_module.budget.cache_clear()
    assert len(lean) == len(full)
    assert lean.share.to_numpy() == pytest.approx(full.share.to_numpy(), abs=1e-5)


def test_a_silenced_head_carries_nothing(pair):
    trace = trace_model(pair.model, TEXT, ablate=[(1, 0)])
    graph = flow_graph(pair.model, trace, threshold=0.0)
    heads = graph[(graph.kind == "head") & (graph.dst_layer == 1)]
    assert len(heads) and not (heads["head"] == 0).any()


def test_bad_requests_say_why(pair):
    trace = trace_model(pair.model, TEXT)
    with pytest.raises(ValueError, match="outside"):
        flow_graph(pair.model, trace, position=99)
    with pytest.raises(ValueError, match="below 1"):
        flow_graph(pair.model, trace, threshold=1.5)
    with pytest.raises(ValueError, match="at least 0"):
        flow_graph(pair.model, trace, threshold=-0.1)
    with pytest.raises(TypeError, match="number"):
        flow_graph(pair.model, trace, threshold="0.1")
    with pytest.raises(TypeError, match="load_model"):
        flow_graph("gpt2", trace)
    with pytest.raises(ValueError, match="stage"):
        node_parts(pair.model, trace, 0, -1, "in")


def test_an_encoder_or_another_models_trace_is_refused(pair):
    encoder = load_model()
    with pytest.raises(ValueError, match="encoder"):
        flow_graph(encoder, trace_model(encoder, TEXT))
    with pytest.raises(ValueError, match="comes from"):
        flow_graph(pair.model, trace_model(encoder, TEXT))


def test_exported_lazily():
    assert attnviz.flow_graph is flow_graph
    assert "flow_graph" in attnviz.__all__


def test_prune_gives_the_graph_of_a_higher_threshold(pair):
    trace = trace_model(pair.model, TEXT)
    low = flow_graph(pair.model, trace, threshold=0.01)
    for tau in (0.04, 0.2):
        want = flow_graph(pair.model, trace, threshold=tau)
        got = prune(low, tau)
        key = ["dst_layer", "dst_stage", "dst_pos", "kind", "src_pos", "head"]
        got, want = (g.sort_values(key).reset_index(drop=True) for g in (got, want))
        assert len(got) == len(want)
        assert got[key].astype(str).equals(want[key].astype(str))
        assert got.weight.to_numpy() == pytest.approx(want.weight.to_numpy(), abs=1e-6)
        assert got.attrs["nodes"] == want.attrs["nodes"]
    with pytest.raises(ValueError, match="below the graph"):
        prune(low, 0.001)


def test_progress_is_heard_in_order_up_to_done(pair):
    heard: list[float] = []
    flow_graph(pair.model, trace_model(pair.model, TEXT), progress=heard.append)
    layers = len(get(pair.eager, PATHS[pair.family][0]))
    assert len(heard) == 2 * layers  # each layer of the rerun, then each layer read
    assert heard == sorted(heard) and heard[-1] == pytest.approx(1.0)
