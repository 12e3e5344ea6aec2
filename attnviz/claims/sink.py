"""Gu et al. 2024 (When Attention Sink Emerges in Language Models): the sink metric and the sink
token's norms.

Sink_ε: for each head, α = the mean weight on the first token over the query rows that can see it
and at least one other key (row 0 sees only itself: its weight 1 is forced by the mask), averaged
over 64-token prompts; Sink_ε is the share of all heads with α > ε (ε = 0.3). Uniform attention
over 64 tokens gives every head α = mean(1 / (i + 1)) ≈ 0.06, so no head passes without a sink.

Norms (sail-sg/Attention-Sink's figure): ‖h‖ of the residual stream entering each block, ‖k‖ and
‖v‖ of each layer's keys and values (mean over K/V heads), the first token's against the mean of
the others'.
"""

from __future__ import annotations

import time

import torch

from attnviz.claims import runs, texts
from attnviz.claims.record import Record, verdict
from attnviz.claims.setting import EPSILON, Setting, command, link
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.tracing import trace_each
from attnviz.engine.trace import Trace

SOURCE = "Gu et al. 2024, When Attention Sink Emerges in Language Models (ICLR 2025), §3 Sink_ε"
NORM_SOURCE = (
    "Gu et al. 2024, §3.2 and sail-sg/Attention-Sink's norm figure (a 32-block LM: the first "
    "token's ‖h‖ ≈ 370 from block 2 on, ‖v‖ 0–0.8 against 0.4–5.8 for other tokens)"
)
H_LARGE = 2.0  # the first token's ‖h‖ counts as large at this many times the others' mean


def first_token_weight(trace: Trace) -> torch.Tensor:
    """Each head's mean weight on key 0 over the rows that may see it and another key.
    [layer, head]"""
    out = []
    for layer in trace.layers:
        w = layer.weights  # [head, q, k]
        n = w.shape[1]
        sees = torch.ones(n, dtype=torch.bool) if layer.mask is None else layer.mask[:, 0].cpu()
        rows = sees & (torch.arange(n) >= 1)  # [q]
        if not rows.any():
            raise ValueError("no query row sees the first token and another key: too short")
        out.append(w[:, rows, 0].mean(-1))  # [head]
    return torch.stack(out)  # [layer, head]


def uniform_alpha(n: int) -> float:
    """α of a head that spreads its weight evenly over the keys a causal row sees."""
    return sum(1.0 / (i + 1) for i in range(1, n)) / (n - 1)


def prompts(model: LoadedModel, s: Setting, count: int) -> list[Trace]:
    """`count` prompts of `s.prompt_tokens` tokens, traced in as few forwards as fit."""
    chosen = texts.long_texts(count, 40 * s.prompt_tokens, s.seed + 1)
    return trace_each(model, chosen, max_length=s.prompt_tokens)


def sink_metric(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    """Sink_0.3 of `model` over `s.sink_prompts` prompts of `s.prompt_tokens` tokens."""
    start = time.perf_counter()
    traces = prompts(model, s, s.sink_prompts)
    alpha = torch.stack([first_token_weight(t) for t in traces]).mean(0)  # [layer, head]
    sinks = alpha > EPSILON  # [layer, head]
    metric = float(sinks.float().mean())
    n = len(traces[0].tokens)
    ok, why = (
        metric > 0,
        (
            f"Sink_{EPSILON} = {metric:.1%} of {sinks.numel()} heads (criterion: > 0, a sink "
            f"exists; "
            f"uniform attention over {n} tokens gives α = {uniform_alpha(n):.3f} to every head)"
        ),
    )
    v, reason = verdict(ok, why)
    return Record(
        claim="sink",
        statement="Attention sinks exist in small auto-regressive LMs: a share of heads put more "
        f"than ε = {EPSILON} of their weight on the first token (Sink_ε over 64-token prompts).",
        source=SOURCE,
        model=name,
        numbers={
            "sink_metric": metric,
            "sink_heads": int(sinks.sum()),
            "heads": int(sinks.numel()),
            "prompts": len(traces),
            "tokens": n,
            "first_token": traces[0].tokens[0],
            "mean_alpha": float(alpha.mean()),
            "uniform_alpha": uniform_alpha(n),
        },
        verdict=v,
        reason=reason,
        command=command("sink", name),
        paper={"epsilon": EPSILON, "prompt_tokens": 64},
        figure={
            "layer_share": sinks.float().mean(1).tolist(),  # [layer]
            "alpha": alpha.tolist(),  # [layer][head]
        },
        link=link("pretrained", pick=name, view="overview", text=_shown(traces[0])),
        seconds=time.perf_counter() - start,
    )


def _shown(trace: Trace) -> str:
    """A prompt as the Pretrained page's sentence: its first 200 characters."""
    return trace.request.text[:200] if trace.request is not None else ""


def _norm_ratios(model: LoadedModel, trace: Trace) -> dict[str, torch.Tensor]:
    """‖·‖ of the first token and the mean of the others', per layer: name -> [2, layer]."""
    h = runs.stream_norms(model, trace.token_ids)  # [layer, n]
    k = torch.stack([lt.k.norm(dim=-1).mean(0) for lt in trace.layers])  # [layer, n]
    v = torch.stack([lt.v.norm(dim=-1).mean(0) for lt in trace.layers])  # [layer, n]
    return {x: torch.stack([t[:, 0], t[:, 1:].mean(-1)]) for x, t in (("h", h), ("k", k), ("v", v))}


def sink_norms(model: LoadedModel, name: str, s: Setting, shared: dict | None = None) -> Record:
    """The first token's ‖h‖, ‖k‖, ‖v‖ by layer against the other tokens'."""
    start = time.perf_counter()
    traces = prompts(model, s, s.norm_prompts)
    each = [_norm_ratios(model, t) for t in traces]
    norms = {x: torch.stack([e[x] for e in each]).mean(0) for x in ("h", "k", "v")}  # [2, layer]
    from_ = min(2, model.n_layers - 1)  # Gu et al.'s figure: from block 2 on
    ratio = {x: (t[0] / t[1].clamp_min(1e-12))[from_:] for x, t in norms.items()}  # [layers]
    h_large = int((ratio["h"] > H_LARGE).sum())
    v_small = int((ratio["v"] < 1).sum())
    half = len(ratio["h"]) / 2
    ok = h_large > half and v_small > half
    v, reason = verdict(ok, (
        f"from layer {from_} on, the first token's ‖h‖ > {H_LARGE:g}× the others' in {h_large} of "
        f"{len(ratio['h'])} layers (median ratio {float(ratio['h'].median()):.1f}) and its ‖v‖ < "
        f"the others' in {v_small} (median ratio {float(ratio['v'].median()):.2f}); criterion: "
        "both in more than half the layers"
    ))  # fmt: skip
    return Record(
        claim="sink_norms",
        statement="The sink token's hidden state is far larger than other tokens' while its value "
        "is small: it stores attention without adding content.",
        source=NORM_SOURCE,
        model=name,
        numbers={
            "h_ratio_median": float(ratio["h"].median()),
            "k_ratio_median": float(ratio["k"].median()),
            "v_ratio_median": float(ratio["v"].median()),
            "layers_h_large": h_large,
            "layers_v_small": v_small,
            "layers": len(ratio["h"]),
            "first_token": traces[0].tokens[0],
        },
        verdict=v,
        reason=reason,
        command=command("sink_norms", name),
        paper={"h_first": 370.0, "v_first": "0–0.8", "v_others": "0.4–5.8"},
        figure={
            f"{x}_{w}": norms[x][i].tolist()
            for x in norms
            for i, w in enumerate(("first", "others"))
        },
        link=link("pretrained", pick=name, view="overview", text=_shown(traces[0])),
        seconds=time.perf_counter() - start,
    )
