"""The configurable toy stack: seeded embeddings, positional encoding, MHA/MQA/GQA layers, W_O,
optional Add & Norm and FFN. Row-vector convention throughout, as most code: Q = X W_q."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from attnviz.engine import validate
from attnviz.engine.attention import attend
from attnviz.engine.budget import budget, check_stack_run
from attnviz.engine.config import StackConfig
from attnviz.engine.request import TraceRequest
from attnviz.engine.tokenize import tokenize
from attnviz.engine.trace import LayerTrace, Trace
from attnviz.engine.writes import key_norms

PAD = "[PAD]"


@dataclass(frozen=True)
class LayerWeights:
    """One layer's matrices, applied to row vectors (x @ W)."""

    w_q: torch.Tensor  # [d_model, n_heads * d_head]
    w_k: torch.Tensor  # [d_model, n_kv_heads * d_head]
    w_v: torch.Tensor  # [d_model, n_kv_heads * d_head]
    w_o: torch.Tensor  # [n_heads * d_head, d_model]
    w_1: torch.Tensor | None = None  # [d_model, d_ff] FFN in
    w_2: torch.Tensor | None = None  # [d_ff, d_model] FFN out


def seeded_generator(*parts: object) -> torch.Generator:
    # A stable seed from any parts (Python's hash() of str changes between processes).
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def _randn(shape: tuple[int, ...], std: float, *parts: object) -> torch.Tensor:
    return torch.randn(shape, generator=seeded_generator(*parts)) * std


def build_weights(config: StackConfig) -> list[LayerWeights]:
    """Seeded weights, one LayerWeights per layer (the same object repeated when shared).

    Entries are N(0, 1/fan_in) so a unit-variance input gives unit-variance q and k components, and
    Var(q·k) ≈ d_head, the fact behind the sqrt(d_k) scale.
    """
    return list(_cached_weights(_weights_key(config)))


def _weights_key(config: StackConfig) -> StackConfig:
    # Scale, mask, positional encoding and Add & Norm do not change the weights: one cache entry.
    return StackConfig(
        d_model=config.d_model,
        n_heads=config.n_heads,
        d_head=config.d_head,
        n_kv_heads=config.n_kv_heads,
        n_layers=config.n_layers,
        ffn=config.ffn,
        d_ff=config.d_ff,
        share_weights=config.share_weights,
        seed=config.seed,
    )


@lru_cache(maxsize=16)
def _cached_weights(config: StackConfig) -> tuple[LayerWeights, ...]:
    d, h, kv, dh = config.d_model, config.n_heads, config.n_kv_heads, config.d_head
    n_distinct = 1 if config.share_weights else config.n_layers
    layers = []
    for i in range(n_distinct):
        s = (config.seed, i)
        w_1 = w_2 = None
        if config.ffn:
            w_1 = _randn((d, config.d_ff), d**-0.5, *s, "w_1")  # [d_model, d_ff]
            w_2 = _randn((config.d_ff, d), config.d_ff**-0.5, *s, "w_2")  # [d_ff, d_model]
        layers.append(
            LayerWeights(
                w_q=_randn((d, h * dh), d**-0.5, *s, "w_q"),  # [d_model, h*d_head]
                w_k=_randn((d, kv * dh), d**-0.5, *s, "w_k", kv),  # [d_model, kv*d_head]
                w_v=_randn((d, kv * dh), d**-0.5, *s, "w_v", kv),  # [d_model, kv*d_head]
                w_o=_randn((h * dh, d), (h * dh) ** -0.5, *s, "w_o"),  # [h*d_head, d_model]
                w_1=w_1,
                w_2=w_2,
            )
        )
    return tuple(layers * config.n_layers if config.share_weights else layers)


@lru_cache(maxsize=8192)
def _token_vector(token: str, d_model: int, seed: int) -> torch.Tensor:
    return _randn((d_model,), 1.0, "embed", seed, token)  # [d_model]


def embed(tokens: list[str], d_model: int, seed: int) -> torch.Tensor:
    """Seeded unit-variance vectors: the same token gets the same vector for the same seed."""
    return torch.stack([_token_vector(t, d_model, seed) for t in tokens])  # [n, d_model]


def sinusoidal(n: int, d_model: int) -> torch.Tensor:
    """The paper's PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)  # [n, 1]
    freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))  # [d/2]
    pe = torch.zeros(n, d_model)  # [n, d_model]
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return pe


def inputs(tokens: list[str], config: StackConfig) -> torch.Tensor:
    """Token embeddings plus the positional encoding the config asks for. [n, d_model]"""
    x = embed(tokens, config.d_model, config.seed)  # [n, d_model]
    if config.positional == "sinusoidal":
        x = x + sinusoidal(len(tokens), config.d_model)
    return x


def attention_block(
    x_q: torch.Tensor,
    x_kv: torch.Tensor,
    w: LayerWeights,
    config: StackConfig,
    mask: torch.Tensor | None,
) -> LayerTrace:
    """Project, split into heads, attend, concat, W_O; returns every intermediate."""
    h, kv, dh = config.n_heads, config.n_kv_heads, config.d_head
    n_q, n_k = x_q.shape[0], x_kv.shape[0]
    q = (x_q @ w.w_q).view(n_q, h, dh).transpose(0, 1)  # [head, q, d_head]
    k = (x_kv @ w.w_k).view(n_k, kv, dh).transpose(0, 1)  # [kv_head, k, d_head]
    v = (x_kv @ w.w_v).view(n_k, kv, dh).transpose(0, 1)  # [kv_head, k, d_head]
    att = attend(q, k, v, mask=mask, scale=config.scale)
    concat = att.z.transpose(0, 1).reshape(n_q, h * dh)  # [q, h*d_head]: torch.cat of the heads
    output = concat @ w.w_o  # [q, d_model]
    return LayerTrace(
        q=q,
        k=k,
        v=v,
        scores=att.scores,
        scale=config.scale,
        mask=mask,
        weights=att.weights,
        z=att.z,
        output=output,
        x=x_q,
        f_norm=key_norms(v, w.w_o, h),  # [head, n_k] ||W_O^h v_j||
    )


def _sublayer(x: torch.Tensor, out: torch.Tensor, add_norm: bool) -> torch.Tensor:
    # Post-norm Add & Norm as in the paper: LayerNorm(x + Sublayer(x)); without it, just the output.
    if not add_norm:
        return out
    return F.layer_norm(x + out, x.shape[-1:])  # [n, d_model]


def _prepare(text: str, config: StackConfig) -> tuple[list[str], int, bool]:
    tokens = tokenize(text)
    n_in = len(tokens)
    limit = min(config.max_tokens, budget().max_tokens)
    return tokens[:limit], n_in, n_in > limit


def run_stack(
    tokens: list[str],
    config: StackConfig,
    weights: list[LayerWeights] | None = None,
    key_tokens: list[str] | None = None,
    key_mask: torch.Tensor | None = None,
) -> Trace:
    """Run the stack on already-split tokens; `key_tokens` switches to cross-attention.

    `key_mask` (bool [n_k], True = may be attended) hides keys from every query, as padding does.
    """
    cross = key_tokens is not None
    check_stack_run(config, len(tokens), len(key_tokens) if cross else len(tokens))
    weights = weights if weights is not None else build_weights(config)
    x = inputs(tokens, config)  # [n_q, d_model]
    memory = inputs(key_tokens, config) if cross else None  # [n_k, d_model]
    n_q, n_k = len(tokens), len(key_tokens) if cross else len(tokens)
    mask = None
    if config.causal and not cross:
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril()  # [q, k]
    if key_mask is not None:
        keys = key_mask.to(torch.bool).unsqueeze(0).expand(n_q, n_k)  # [q, k]
        mask = keys.clone() if mask is None else mask & keys
    layers = []
    with torch.inference_mode():
        for w in weights:
            layer = attention_block(x, memory if cross else x, w, config, mask)
            layers.append(layer)
            x = _sublayer(x, layer.output, config.add_norm)
            if config.ffn:
                hidden = torch.relu(x @ w.w_1)  # [n, d_ff]
                x = _sublayer(x, hidden @ w.w_2, config.add_norm)
    return Trace(
        tokens=list(tokens),
        layers=layers,
        source="stack",
        key_tokens=list(key_tokens) if cross else None,
        hidden=x,
        meta={"config": config},
    )


def trace_text(
    text: str,
    config: StackConfig | None = None,
    text_pair: str | None = None,
    pad_to: int = 0,
) -> Trace:
    """Tokenize and run the toy stack, seeded and deterministic.

    With `text_pair`, queries come from `text` and keys and values from `text_pair`
    (cross-attention; the causal mask applies to self-attention only). `pad_to` appends [PAD]
    tokens up to that length and masks them as keys, to show a padding mask.
    """
    config = config if config is not None else StackConfig()
    if not isinstance(config, StackConfig):
        raise TypeError(f"config must be a StackConfig or None, not {type(config).__name__}")
    text = validate.text("text", text)
    text_pair = validate.optional_text("text_pair", text_pair)
    pad_to = validate.whole("pad_to", pad_to, 0)
    tokens, n_in, truncated = _prepare(text, config)
    key_tokens, n_in_pair = None, None
    if text_pair is not None:
        key_tokens, n_in_pair, truncated_pair = _prepare(text_pair, config)
        truncated = truncated or truncated_pair
    key_mask = None
    if pad_to and key_tokens is None and pad_to > len(tokens):
        limit = min(config.max_tokens, budget().max_tokens)
        if pad_to > limit:
            raise ValueError(f"pad_to={pad_to} is past the token limit {limit}")
        key_mask = torch.tensor([True] * len(tokens) + [False] * (pad_to - len(tokens)))
        tokens = tokens + [PAD] * (pad_to - len(tokens))
    trace = run_stack(tokens, config, key_tokens=key_tokens, key_mask=key_mask)
    trace.truncated = truncated
    trace.n_input_tokens = n_in
    trace.meta["n_input"] = {"text": n_in, "pair": n_in_pair}  # which sentence was cut
    if key_mask is not None:
        trace.special = {PAD: [i for i, t in enumerate(key_mask.tolist()) if not t]}
    else:  # what the trace answers: trace_text(request.text, request.model, request.pair)
        trace.request = TraceRequest(config, text, text_pair)
    return trace
