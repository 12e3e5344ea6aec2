"""Attribution patching (AtP) and the AtP* query/key correction: the patching sweep of
measures/patching.py estimated from one forward on each prompt and one backward.

AtP (Nanda 2022; Kramár et al. 2024, arXiv 2403.00745) linearises the metric m = logit(answer) −
logit(foil) around the base run: patching activation a from the source run changes m by about

    (a_source − a_base) · ∂m/∂a |base

with a_source and a_base read off the two runs (Δa exact) and ∂m/∂a from one backward of the
base run. The base is the corrupt run when denoising (the default), the clean run when noising.
Rows: a head's z before W_O at every position (`over="heads"`), one position of it
(`"positions"`), the residual stream entering a layer at a position (`"residual"`).

AtP* (ibid., section 3.1.1) fixes AtP's false negatives where attention saturates: a head's
query or key patched alone moves its attention pattern A = softmax(q·kᵀ·scale) in a way a
gradient at a saturated softmax does not see, so AtP* recomputes the softmax with the patched
queries or keys and linearises only in A (∂m/∂A = ∂m/∂z · Vᵀ, z = A V). What is implemented:

- `query`: A' = softmax(q_source · k_baseᵀ) (all of the head's queries, or the one at the row's
  position), Σ ∂m/∂A ⊙ (A' − A);
- `key`: A' = softmax(q_base · k_sourceᵀ) for a whole head; for one key position s, every row t's
  softmax with its logit at s alone replaced, in closed form (the paper's fast key fix:
  A'_tj = A_tj / r for j ≠ s, A'_ts = exp(a'_ts − lse_t) / r, r = 1 − A_ts + exp(a'_ts − lse_t));
- `value`: Σ ∂m/∂z ⊙ A (v_source − v_base), linear (z is linear in v);
- `star` = query + key + value (heads only): the head's effect as AtP* counts it, its q, k and v
  nodes apart. For `"positions"` the parts are nodes of their own: the head's query at the row's
  position (its row of A), its key and its value there (every later row reads them), not z there.

For a whole head's z, plain AtP already recomputes the head's own softmax (Δz comes from the
two runs), so `estimate` is AtP on z; `star` shows where the head's effect comes from (its
queries, keys or values) and where the q/k/v sum and the z estimate disagree. Residual rows have
no query/key part. Not implemented: GradDrop (AtP*'s second fix, for cancellation between a
component's direct and indirect paths; L extra backwards) and the paper's false-negative bound.
No streamlit here.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import torch

from attnviz.engine.attention import expand_kv, masked_softmax
from attnviz.engine.hooked.intercept import Call, Recording
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.request import Knobs
from attnviz.measures.patch_runs import (
    Caught,
    PatchSetup,
    check_decoder,
    decoder_blocks,
    effect,
    hooked,
    metric_of,
    rows_input,
    setup,
)
from attnviz.measures.patching import check_options, components

if TYPE_CHECKING:
    import pandas as pd

MISS = 0.1  # a miss: the estimate is off the exact effect by more than 10 % of clean − corrupt


def graph_run(s: PatchSetup, ids: torch.Tensor) -> tuple[Caught, dict]:
    """One forward of ids [1, n] keeping a graph from the embeddings on, and one backward of the
    metric: the caught activations (detached) and their gradients by name ("z", "resid", "A"
    per layer)."""
    model = s.model
    caught = Caught()
    me = threading.get_ident()

    def grad_from_here(module, args, output):  # the embeddings: a leaf of the graph
        if threading.get_ident() == me:
            return output.detach().requires_grad_(True)
        return None

    handle = model.model.get_input_embeddings().register_forward_hook(grad_from_here)
    try:
        with torch.enable_grad(), hooked(model, read=caught):
            out = model.model(**rows_input(ids, 1, model), attnviz_call=Call(Knobs()))
            m = metric_of(out.logits[:, -1], s.answer, s.foil)[0]
            layers = sorted(caught.z)
            wanted = [caught.z[i] for i in layers] + [caught.resid[i] for i in layers]
            grads = torch.autograd.grad(m, wanted, allow_unused=True)
    finally:
        handle.remove()
    n_l = len(layers)
    zero = [
        (torch.zeros_like(w) if g is None else g)[0] for w, g in zip(wanted, grads, strict=True)
    ]
    out_grads = {"z": dict(zip(layers, zero[:n_l], strict=True)),
                 "resid": dict(zip(layers, zero[n_l:], strict=True))}  # fmt: skip
    caught.z = {i: caught.z[i][0].detach() for i in layers}
    caught.resid = {i: caught.resid[i][0].detach() for i in layers}
    caught.logits = out.logits[0, -1].detach().float()
    return caught, out_grads


def _heads_view(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[n, head * d_head] -> [head, n, d_head]"""
    n = x.shape[0]
    return x.reshape(n, n_heads, -1).transpose(0, 1)


def _qk_parts(base: Recording, src: Recording, g_z: torch.Tensor, layer: int, one_head: bool):
    """The query, key and value parts (AtP*) of each head of `layer`, for the whole head
    ([head] each) or each position ([head, n] each). g_z: ∂m/∂z [head, n, d_head]."""
    rb, rs = base.layers[layer], src.layers[layer]
    dt = torch.float64
    n_heads = rb.q.shape[1]
    q_b, q_s = rb.q[0].to(dt), rs.q[0].to(dt)  # [head, n, d]
    k_b, k_s = expand_kv(rb.k, n_heads)[0].to(dt), expand_kv(rs.k, n_heads)[0].to(dt)
    v_b, v_s = expand_kv(rb.v, n_heads)[0].to(dt), expand_kv(rs.v, n_heads)[0].to(dt)
    mask = None if rb.mask is None else rb.mask[0].bool()  # [1, n|1, n]
    a_b = rb.weights[0].to(dt)  # [head, n, n]
    g = g_z.to(dt)
    g_a = g @ v_b.transpose(-1, -2)  # ∂m/∂A [head, n, n]
    value_rows = (a_b.transpose(-1, -2) @ g) * (v_s - v_b)  # [head, n(key), d]
    value = value_rows.sum(-1)  # [head, n] by key position
    a_q = masked_softmax(q_s @ k_b.transpose(-1, -2) * rb.scale, mask)  # [head, n, n]
    query = (g_a * (a_q - a_b)).sum(-1)  # [head, n] by query position
    if one_head:
        a_k = masked_softmax(q_b @ k_s.transpose(-1, -2) * rb.scale, mask)
        key = (g_a * (a_k - a_b)).sum((-1, -2))  # [head]
        return query.sum(-1), key, value.sum(-1)
    return query, _key_fix(q_b, k_b, k_s, a_b, g_a, rb.scale, mask), value


def _key_fix(q_b, k_b, k_s, a_b, g_a, scale: float, mask) -> torch.Tensor:
    """Σ_t Σ_j ∂m/∂A_tj (A'_tj − A_tj) with only key s patched, for every head and s, each row's
    softmax recomputed in closed form. [head, n]"""
    logits = q_b @ k_b.transpose(-1, -2) * scale  # [head, t, j]
    patched = q_b @ k_s.transpose(-1, -2) * scale  # [head, t, s] a'_ts
    allowed = torch.ones_like(logits, dtype=torch.bool) if mask is None else mask.expand_as(logits)
    lse = logits.masked_fill(~allowed, float("-inf")).logsumexp(-1, keepdim=True)  # [head, t, 1]
    b = (patched - lse).clamp(max=80.0).exp()  # exp(a'_ts − lse_t)
    r = 1.0 - a_b + b  # [head, t, s]
    total = (g_a * a_b).sum(-1, keepdim=True)  # S_t [head, t, 1]
    change = (total - g_a * a_b) * (1.0 / r - 1.0) + g_a * (b / r - a_b)  # [head, t, s]
    return change.masked_fill(~allowed, 0.0).sum(-2)  # [head, s]


def estimates(s: PatchSetup, runs: tuple[Caught, Caught], over: str, layer, direction: str):
    """The AtP rows of one sweep: the components, each one's estimated metric change, and the
    AtP* parts (query, key, value) where `over` has them (None for residual rows)."""
    src, base_ids = (runs[0], s.corrupt_ids) if direction == "denoising" else (runs[1], s.clean_ids)
    base, grads = graph_run(s, base_ids)
    model, comps = s.model, components(s.model, s.n, over, layer)
    blocks = {b.layer: b for b in decoder_blocks(model)}
    if over == "residual":
        per = {i: ((src.resid[i] - base.resid[i]) * grads["resid"][i]).sum(-1) for i in blocks}
        return comps, [float(per[la][t]) for la, t in comps], None
    est, parts = [], []
    one_head = over == "heads"
    base_rec = (runs[1] if direction == "denoising" else runs[0]).record
    src_rec = src.record
    layers = sorted(blocks) if one_head else [layer]
    by_layer = {}
    for la in layers:
        h = blocks[la].n_heads
        dz = _heads_view(src.z[la] - base.z[la], h).double()  # [head, n, d]
        g = _heads_view(grads["z"][la], h).double()
        atp = (dz * g).sum(-1)  # [head, n]
        q, k, v = _qk_parts(base_rec, src_rec, g, la, one_head)
        by_layer[la] = (atp.sum(-1) if one_head else atp, q, k, v)
    for comp in comps:
        atp, q, k, v = by_layer[comp[0]]
        at = (comp[1],) if one_head else (comp[1], comp[2])
        est.append(float(atp[at]))
        parts.append((float(q[at]), float(k[at]), float(v[at])))
    return comps, est, parts


def attribute(
    s: PatchSetup,
    runs: tuple[Caught, Caught],
    over: str = "heads",
    layer: int | None = None,
    exact: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The AtP frame of a setup (see attribution_patching); `runs`: setup's clean and corrupt."""
    import pandas as pd

    direction = "denoising" if exact is None else exact.attrs.get("direction", "denoising")
    check_options(over, direction)
    comps, est, parts = estimates(s, runs, over, layer, direction)
    names = {"heads": ["layer", "head"], "residual": ["layer", "position"],
             "positions": ["layer", "head", "position"]}[over]  # fmt: skip
    frame = pd.DataFrame(comps, columns=names)
    start = s.corrupt if direction == "denoising" else s.clean
    frame["estimate"] = est
    frame["metric"] = start + frame["estimate"]
    frame["effect"] = effect(frame["metric"], s)
    if parts is not None:
        frame[["query", "key", "value"]] = parts
    if over == "heads":  # one head's q, k and v patched together: the z patch, counted apart
        frame["star"] = frame[["query", "key", "value"]].sum(axis=1)
        frame["effect_star"] = effect(start + frame["star"], s)
    if exact is not None:
        _beside(frame, exact, names)
    frame.attrs.update(s.attrs(), over=over, direction=direction, method="AtP")
    return frame


def _beside(frame: pd.DataFrame, exact: pd.DataFrame, names: list[str]) -> None:
    """The exact effect beside each row and `miss`: |estimate − exact| > 10 % of the gap."""
    if "effect" not in exact.columns or not set(names) <= set(exact.columns):
        raise ValueError(f"exact must be a frame from attnviz.patch with the same over ({names})")
    joined = frame[names].merge(exact[[*names, "effect"]], on=names, how="left")
    frame["exact"] = joined["effect"].to_numpy()
    frame["miss"] = (frame["effect"] - frame["exact"]).abs() > MISS
    if "effect_star" in frame.columns:
        frame["miss_star"] = (frame["effect_star"] - frame["exact"]).abs() > MISS


def attribution_patching(
    model: LoadedModel,
    clean: str,
    corrupt: str,
    answer: int | str | None = None,
    foil: int | str | None = None,
    over: str = "heads",
    exact: pd.DataFrame | None = None,
    layer: int | None = None,
) -> pd.DataFrame:
    """Attribution patching: `attnviz.patch`'s frame estimated from one forward on each prompt and
    one backward (see the module's docstring for AtP and the AtP* parts).

    Same arguments as patch; the direction is `exact`'s when it is given, else denoising.
    Columns: the component (layer, head and/or position), `estimate` (AtP's change of the
    metric), `metric` (the base run's plus it), `effect` (as patch's), and for heads and
    positions the AtP* parts `query`, `key`, `value`, their sum `star` and `effect_star`. With
    `exact` (a frame from patch, same over): `exact` (its effect), `miss` (|effect − exact| >
    0.1, i.e. 10 % of clean − corrupt) and `miss_star` (the same for effect_star)."""
    check_options(over, "denoising")
    check_decoder(model)
    components(model, 1, over, layer)  # a bad layer is refused before any forward
    s, run_clean, run_corrupt = setup(model, clean, corrupt, answer, foil)
    if exact is not None and exact.attrs.get("answer_id", s.answer) != s.answer:
        raise ValueError("exact was measured with another answer: pass the same answer and foil")
    return attribute(s, (run_clean, run_corrupt), over, layer, exact)
