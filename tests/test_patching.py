"""Activation patching and attribution patching (measures/patching.py, measures/attribution.py)
against oracles written here: the same model loaded with Hugging Face's eager attention, its
activation replaced by a hook of the test's own, and autograd's gradient of the metric dotted with
the difference of the two runs. Tiny random Llama (GQA: 2 query heads per kv head), GPT-2 and
Gemma 3 (sliding-window layers, a norm after attention)."""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.engine.attention import masked_softmax
from attnviz.engine.budget import Budget
from attnviz.engine.hooked import load_model
from attnviz.measures import attribution, patching
from tests.writes_models import PATHS, build, gemma3_family, get

CLEAN = "the cat sat on the mat and the cat"
CORRUPT = "the dog sat on the mat and the cat"
D_HEAD = 8  # both tiny models: d_model 32, 4 heads


@pytest.fixture(scope="module", params=["llama", "gpt2", "gemma3_text"])
def pair(request, tmp_path_factory):
    with gemma3_family():  # Gemma 3: a sliding window, a norm after attention, scaled embeddings
        yield build(request.param, tmp_path_factory.mktemp(request.param))


def ids(pair, text: str) -> torch.Tensor:
    return pair.model.call_tokenizer(text, return_tensors="pt")["input_ids"]


def modules(pair):
    layers_path, _, w_o_path, _ = PATHS[pair.family]
    layers = list(get(pair.eager, layers_path))
    return layers, [get(layer, w_o_path) for layer in layers]


def eager_metric(pair, text: str, answer: int, foil: int, replace=None) -> float:
    """The eager model's logit(answer) − logit(foil) after the last token, with `replace`
    {module: fn(x) -> x} applied to each module's input by a pre-hook."""
    handles = [
        mod.register_forward_pre_hook(lambda m, args, fn=fn: (fn(args[0]), *args[1:]))
        for mod, fn in (replace or {}).items()
    ]
    try:
        with torch.no_grad():
            logits = pair.eager(input_ids=ids(pair, text)).logits[0, -1]
    finally:
        for h in handles:
            h.remove()
    return float(logits[answer] - logits[foil])


def eager_inputs_of(pair, text: str, mods) -> dict:
    """What enters each module of `mods` on the eager model's run of `text` (row 0)."""
    seen = {}
    handles = [
        mod.register_forward_pre_hook(lambda m, args, i=i: seen.__setitem__(i, args[0][0].clone()))
        for i, mod in enumerate(mods)
    ]
    try:
        with torch.no_grad():
            pair.eager(input_ids=ids(pair, text))
    finally:
        for h in handles:
            h.remove()
    return seen


def test_the_runs_metric_is_the_eager_models(pair):
    f = attnviz.patch(pair.model, CLEAN, CORRUPT)
    a, b = f.attrs["answer_id"], f.attrs["foil_id"]
    assert f.attrs["clean"] == pytest.approx(eager_metric(pair, CLEAN, a, b), abs=1e-5)
    assert f.attrs["corrupt"] == pytest.approx(eager_metric(pair, CORRUPT, a, b), abs=1e-5)
    assert f.attrs["differ"] == [2]
    assert len(f) == 2 * 4 and list(f.columns) == ["layer", "head", "metric", "effect"]


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_a_patched_head_equals_the_eager_model_with_that_head_replaced(pair, direction):
    f = attnviz.patch(pair.model, CLEAN, CORRUPT, direction=direction)
    a, b = f.attrs["answer_id"], f.attrs["foil_id"]
    src, base = (CLEAN, CORRUPT) if direction == "denoising" else (CORRUPT, CLEAN)
    layers, w_os = modules(pair)
    z_src = eager_inputs_of(pair, src, w_os)  # [n, head * d_head] by layer
    for layer, head in [(0, 1), (1, 3)]:
        cols = slice(head * D_HEAD, (head + 1) * D_HEAD)

        def put(x, layer=layer, cols=cols):
            x = x.clone()
            x[0, :, cols] = z_src[layer][:, cols]
            return x

        want = eager_metric(pair, base, a, b, {w_os[layer]: put})
        got = f.query("layer == @layer and head == @head")["metric"].item()
        assert got == pytest.approx(want, abs=1e-5)


def test_residual_and_position_patches_equal_the_eager_model_with_them_replaced(pair):
    res = attnviz.patch(pair.model, CLEAN, CORRUPT, over="residual")
    pos = attnviz.patch(pair.model, CLEAN, CORRUPT, over="positions", layer=0)
    a, b = res.attrs["answer_id"], res.attrs["foil_id"]
    layers, w_os = modules(pair)
    x_src = eager_inputs_of(pair, CLEAN, layers)
    z_src = eager_inputs_of(pair, CLEAN, w_os)
    n = len(res.attrs["clean_tokens"])
    for layer, t in [(0, 2), (1, 2), (1, n - 1)]:

        def put(x, layer=layer, t=t):
            x = x.clone()
            x[0, t] = x_src[layer][t]
            return x

        want = eager_metric(pair, CORRUPT, a, b, {layers[layer]: put})
        got = res.query("layer == @layer and position == @t")["metric"].item()
        assert got == pytest.approx(want, abs=1e-5)
    for head, t in [(0, 2), (2, n - 1)]:
        cols = slice(head * D_HEAD, (head + 1) * D_HEAD)

        def put_z(x, t=t, cols=cols):
            x = x.clone()
            x[0, t, cols] = z_src[0][t, cols]
            return x

        want = eager_metric(pair, CORRUPT, a, b, {w_os[0]: put_z})
        got = pos.query("head == @head and position == @t")["metric"].item()
        assert got == pytest.approx(want, abs=1e-5)
    assert res.query("layer == 0 and position != 2")["effect"].abs().max() < 1e-5  # same inputs


def test_a_head_whose_z_is_the_same_on_both_runs_changes_nothing(tmp_path_factory):
    pair = build("llama", tmp_path_factory.mktemp("silent"))
    v = pair.model.model.model.layers[1].self_attn.v_proj.weight  # kv head 0: query heads 0, 1
    with torch.no_grad():
        v[:D_HEAD] = 0.0  # their values are 0 on any input: z = 0 on both runs
    f = attnviz.patch(pair.model, CLEAN, CORRUPT)
    silent = f.query("layer == 1 and head in (0, 1)")
    assert (silent["metric"] - f.attrs["corrupt"]).abs().max() < 1e-6
    assert silent["effect"].abs().max() < 1e-4
    assert f.query("layer == 1 and head in (2, 3)")["effect"].abs().max() > 1e-3  # others do


def test_atp_is_autograds_gradient_dotted_with_the_difference(pair):
    f = attribution.attribution_patching(pair.model, CLEAN, CORRUPT)
    a, b = f.attrs["answer_id"], f.attrs["foil_id"]
    layers, w_os = modules(pair)
    z_clean = eager_inputs_of(pair, CLEAN, w_os)
    caught = {}
    handles = [
        mod.register_forward_pre_hook(lambda m, args, i=i: caught.__setitem__(i, args[0]))
        for i, mod in enumerate(w_os)
    ]
    try:
        emb = pair.eager.get_input_embeddings()(ids(pair, CORRUPT)).requires_grad_(True)
        logits = pair.eager(inputs_embeds=emb).logits[0, -1]
        grads = torch.autograd.grad(logits[a] - logits[b], [caught[i] for i in sorted(caught)])
    finally:
        for h in handles:
            h.remove()
    for layer, g in enumerate(grads):
        delta = z_clean[layer] - caught[layer][0].detach()  # [n, head * d_head]
        per_head = (delta * g[0]).reshape(delta.shape[0], -1, D_HEAD).sum((0, 2))  # [head]
        got = f.query("layer == @layer").sort_values("head")["estimate"].to_numpy()
        assert got == pytest.approx(per_head.numpy(), abs=1e-6)


def test_atp_against_exact_marks_the_misses(pair):
    exact = attnviz.patch(pair.model, CLEAN, CORRUPT, over="residual")
    f = attnviz.attribution_patching(pair.model, CLEAN, CORRUPT, over="residual", exact=exact)
    assert (f["exact"] == exact["effect"]).all()
    assert (f["miss"] == ((f["effect"] - f["exact"]).abs() > 0.1)).all()
    assert f.attrs["method"] == "AtP"


def test_the_key_fix_is_each_softmax_recomputed():
    gen = torch.Generator().manual_seed(3)
    h, n, d = 2, 5, 4
    q_b, k_b, k_s, v = (torch.randn(h, n, d, generator=gen, dtype=torch.float64) for _ in range(4))
    mask = torch.ones(n, n, dtype=torch.bool).tril()[None]
    scale = 0.7
    a_b = masked_softmax(q_b @ k_b.transpose(-1, -2) * scale, mask)
    g_a = torch.randn(h, n, n, generator=gen, dtype=torch.float64)
    got = attribution._key_fix(q_b, k_b, k_s, a_b, g_a, scale, mask)  # [head, s]
    for s in range(n):
        k = k_b.clone()
        k[:, s] = k_s[:, s]
        a_new = masked_softmax(q_b @ k.transpose(-1, -2) * scale, mask)
        want = (g_a * (a_new - a_b)).sum((-1, -2))  # [head]
        assert got[:, s] == pytest.approx(want, abs=1e-10)


def test_mismatched_lengths_say_where(pair):
    with pytest.raises(ValueError, match=r"same number of tokens.*differ at clean 2–2 \['cat'\]"):
        attnviz.patch(pair.model, CLEAN, "the big dog sat on the mat and the cat")


def test_an_answer_of_several_tokens_is_refused(pair):
    with pytest.raises(ValueError, match=r"answer='xylophonists' is not one token"):
        attnviz.patch(pair.model, CLEAN, CORRUPT, answer="xylophonists")
    with pytest.raises(ValueError, match="same token"):
        attnviz.patch(pair.model, CLEAN, CORRUPT, answer="cat", foil="cat")


def test_a_sweep_over_the_budget_is_refused(pair, monkeypatch):
    monkeypatch.setattr(patching, "budget", lambda: Budget(max_sweep_work=10**6))
    with pytest.raises(ValueError, match="patching 8 components.*this server allows"):
        attnviz.patch(pair.model, CLEAN, CORRUPT)


def test_bad_options_and_encoders_are_refused(pair):
    with pytest.raises(ValueError, match="over='layers' must be one of"):
        attnviz.patch(pair.model, CLEAN, CORRUPT, over="layers")
    with pytest.raises(ValueError, match="over='positions' needs layer="):
        attnviz.patch(pair.model, CLEAN, CORRUPT, over="positions", layer=7)
    with pytest.raises(ValueError, match="without a language-model head"):
        attnviz.patch(load_model(device="cpu"), CLEAN, CORRUPT)


def test_a_stopped_sweep_keeps_the_rows_done(pair, monkeypatch):
    from attnviz.measures.patch_runs import setup

    monkeypatch.setattr(patching, "MOST_ROWS", 3)
    s, run_a, run_b = setup(pair.model, CLEAN, CORRUPT)
    f = patching.sweep(s, (run_a, run_b), step=lambda done, total: done < 3)
    assert len(f) == 3 and f.attrs["stopped"]


def test_show_draws_the_exact_and_atp_maps_and_the_residual_cells(pair):
    from tests.apphelpers import decode

    view = attnviz.show(pair.model, view="patch", text=CLEAN, other=CORRUPT)
    exact = attnviz.patch(pair.model, CLEAN, CORRUPT)
    z = decode(view.figures[0].to_plotly_json()["data"][0]["z"])
    for row in exact.itertuples():
        assert z[row.layer, row.head] == pytest.approx(row.effect, abs=1e-5)
    assert len(view.figures) == 3
    with pytest.raises(TypeError, match="needs other="):
        attnviz.show(pair.model, view="patch", text=CLEAN)


def test_atp_star_parts_are_the_eager_models_pattern_gradient_times_the_recomputed_change(
    tmp_path_factory,
):
    """query and key: autograd's ∂m/∂A of the eager model (its attention weights) dotted with
    softmax(q·kᵀ) recomputed from the traced q and k with one side taken from the clean run;
    value: ∂m/∂z dotted with A (v_clean − v_corrupt), v read off the eager model's v_proj."""
    pair = build("llama", tmp_path_factory.mktemp("star"))
    f = attnviz.attribution_patching(pair.model, CLEAN, CORRUPT)
    a, b = f.attrs["answer_id"], f.attrs["foil_id"]
    layers, w_os = modules(pair)
    v_projs = [layer.self_attn.v_proj for layer in layers]
    caught, v_out = {}, {}
    handles = [m.register_forward_pre_hook(lambda m, args, i=i: caught.__setitem__(i, args[0]))
               for i, m in enumerate(w_os)]  # fmt: skip
    handles += [m.register_forward_hook(lambda m, args, out, i=i: v_out.__setitem__(i, out))
                for i, m in enumerate(v_projs)]  # fmt: skip
    try:
        emb = pair.eager.get_input_embeddings()(ids(pair, CORRUPT)).requires_grad_(True)
        out = pair.eager(inputs_embeds=emb, output_attentions=True)
        logits = out.logits[0, -1]
        wanted = [*out.attentions, *(caught[i] for i in range(len(w_os)))]
        grads = torch.autograd.grad(logits[a] - logits[b], wanted)
    finally:
        for h in handles:
            h.remove()
    v_corrupt = {i: v.detach()[0] for i, v in v_out.items()}
    handles = [m.register_forward_hook(lambda m, args, out, i=i: v_out.__setitem__(i, out))
               for i, m in enumerate(v_projs)]  # fmt: skip
    with torch.no_grad():
        pair.eager(input_ids=ids(pair, CLEAN))
    for h in handles:
        h.remove()
    v_clean = {i: v.detach()[0] for i, v in v_out.items()}
    clean, corrupt = (attnviz.trace_model(pair.model, t) for t in (CLEAN, CORRUPT))
    n_l = len(w_os)
    for layer in range(n_l):
        lc, lb = clean.layers[layer], corrupt.layers[layer]
        g_a = grads[layer][0].double()  # [head, n, n]
        g_z = (
            grads[n_l + layer][0].detach().reshape(-1, lb.n_heads, D_HEAD).transpose(0, 1).double()
        )
        mask = torch.ones(lb.n_q, lb.n_k, dtype=torch.bool).tril()
        for h in range(lb.n_heads):
            g = lb.kv_head(h)
            a_b = out.attentions[layer][0, h].detach().double()
            a_q = masked_softmax(lc.head("q", h) @ lb.head("k", g).T * lb.scale, mask).double()
            a_k = masked_softmax(lb.head("q", h) @ lc.head("k", g).T * lb.scale, mask).double()
            cols = slice(g * D_HEAD, (g + 1) * D_HEAD)
            dv = (v_clean[layer][:, cols] - v_corrupt[layer][:, cols]).double()  # [n, d]
            row = f.query("layer == @layer and head == @h").iloc[0]
            assert row["query"] == pytest.approx(float((g_a[h] * (a_q - a_b)).sum()), abs=1e-6)
            assert row["key"] == pytest.approx(float((g_a[h] * (a_k - a_b)).sum()), abs=1e-6)
            assert row["value"] == pytest.approx(float((g_z[h] * (a_b @ dv)).sum()), abs=1e-6)


def test_residual_atp_is_autograds_gradient_dotted_with_the_difference(pair):
    f = attnviz.attribution_patching(pair.model, CLEAN, CORRUPT, over="residual")
    a, b = f.attrs["answer_id"], f.attrs["foil_id"]
    layers, _ = modules(pair)
    x_clean = eager_inputs_of(pair, CLEAN, layers)
    caught = {}
    handles = [
        mod.register_forward_pre_hook(lambda m, args, i=i: caught.__setitem__(i, args[0]))
        for i, mod in enumerate(layers)
    ]
    try:
        emb = pair.eager.get_input_embeddings()(ids(pair, CORRUPT)).requires_grad_(True)
        logits = pair.eager(inputs_embeds=emb).logits[0, -1]
        grads = torch.autograd.grad(logits[a] - logits[b], [caught[i] for i in sorted(caught)])
    finally:
        for h in handles:
            h.remove()
    for layer, g in enumerate(grads):
        want = ((x_clean[layer] - caught[layer][0].detach()) * g[0]).sum(-1)  # [n]
        got = f.query("layer == @layer").sort_values("position")["estimate"].to_numpy()
        assert got == pytest.approx(want.numpy(), abs=1e-6)
