"""MHA, MQA and GQA side by side on the toy stack (note 003), with live equivalence checks.

Query head h reads key/value head h // (n_heads // n_kv_heads), as torch's enable_gqa. Note 003's
GroupQueryAttention.split_head does not run (five indices into a 3-D tensor, groups reshaped in the
wrong order); this is the working convention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from attnviz.engine import validate
from attnviz.engine.attention import kv_head
from attnviz.engine.config import StackConfig, checked
from attnviz.engine.stack import LayerWeights, build_weights, inputs, run_stack
from attnviz.engine.tokenize import tokenize


def kv_head_of(n_heads: int, n_kv_heads: int) -> list[int]:
    """For each query head, the key/value head it reads."""
    n_heads = validate.whole("n_heads", n_heads, 1, 4096)
    n_kv_heads = validate.whole("n_kv_heads", n_kv_heads, 1, n_heads)
    return [kv_head(h, n_heads, n_kv_heads) for h in range(n_heads)]  # divisibility checked there


def expand_to_mha(w: LayerWeights, config: StackConfig) -> LayerWeights:
    """The MHA weights that do what a GQA layer does: each K/V projection copied to its group."""
    d, kv, dh = config.d_model, config.n_kv_heads, config.d_head
    group = config.n_heads // kv

    def expand(m: torch.Tensor) -> torch.Tensor:
        blocks = m.view(d, kv, dh)  # [d_model, kv_head, d_head]
        return blocks.repeat_interleave(group, dim=1).reshape(d, kv * group * dh)

    return replace(w, w_k=expand(w.w_k), w_v=expand(w.w_v))


@dataclass(frozen=True)
class SharingCheck:
    gqa_vs_tied_mha: float  # max |Δ output| of GQA against MHA with K/V copied per group
    all_groups_vs_mha: float  # n_kv_heads = n_heads against plain MHA (the same weights)
    one_group_vs_mqa: float  # n_kv_heads = 1 against an MQA written with one shared K and V


def sharing_check(text: str, config: StackConfig) -> SharingCheck:
    """Run the three equivalences of note 003 on `text` and report the largest differences."""
    text, config = validate.text("text", text), checked(config)
    tokens = tokenize(text)[: config.max_tokens]
    one = replace(config, n_layers=1, share_weights=False)

    gqa = run_stack(tokens, one)
    tied = run_stack(
        tokens,
        replace(one, n_kv_heads=one.n_heads),
        [expand_to_mha(w, one) for w in build_weights(one)],
    )
    full = replace(one, n_kv_heads=one.n_heads)
    as_gqa = run_stack(tokens, full, build_weights(full))
    as_mha = run_stack(tokens, replace(full, n_kv_heads=None), build_weights(full))

    mqa = replace(one, n_kv_heads=1)
    w = build_weights(mqa)[0]
    x = inputs(tokens, mqa)  # [n, d_model]
    n, h, dh = len(tokens), mqa.n_heads, mqa.d_head
    q = (x @ w.w_q).view(n, h, dh).transpose(0, 1)  # [head, n, d_head]
    k = (x @ w.w_k).unsqueeze(0).expand(h, n, dh)  # [head, n, d_head]: one K, broadcast
    v = (x @ w.w_v).unsqueeze(0).expand(h, n, dh)  # [head, n, d_head]: one V, broadcast
    z = F.scaled_dot_product_attention(q, k, v, scale=mqa.scale, is_causal=mqa.causal)
    mqa_out = z.transpose(0, 1).reshape(n, h * dh) @ w.w_o  # [n, d_model]
    via_gqa = run_stack(tokens, mqa).layers[0].output

    def gap(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max())

    return SharingCheck(
        gqa_vs_tied_mha=gap(gqa.layers[0].output, tied.layers[0].output),
        all_groups_vs_mha=gap(as_gqa.layers[0].output, as_mha.layers[0].output),
        one_group_vs_mqa=gap(via_gqa, mqa_out),
    )


def comparison(config: StackConfig, seq_len: int = 4096, bytes_per_value: float = 2) -> dict:
    """Note 003's MHA / MQA / GQA table with numbers for `config`: K/V heads, parameters of one
    attention layer (and of W_k + W_v alone), and KV-cache bytes per layer at `seq_len`."""
    from attnviz.lessons import costs

    config = checked(config)
    seq_len = validate.whole("seq_len", seq_len, 1, 10**9)
    bytes_per_value = validate.number("bytes_per_value", bytes_per_value, 0.125, 64)
    d, h, dh = config.d_model, config.n_heads, config.d_head
    kinds = {"MHA": h, "MQA": 1, f"GQA (G = {config.n_kv_heads})": config.n_kv_heads}
    out = {}
    for name, kv in kinds.items():
        parts = costs.attention_params_breakdown(d, h, dh, dh, kv)
        out[name] = {
            "kv_heads": kv,
            "params": sum(parts.values()),
            "kv_params": parts["W_K"] + parts["W_V"],
            "cache_bytes": costs.kv_cache_bytes(1, kv, dh, seq_len, 1, bytes_per_value),
        }
    return out
