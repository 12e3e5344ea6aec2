"""Parameter, FLOP and KV-cache counts for attention and the 2017 Transformer (notes 001, 003, 004).

Pure Python, no torch: every function returns whole numbers a cost page can print or chart.
"""

from __future__ import annotations

import math

from attnviz.engine.config import divisors, or_list


def _whole(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be a whole number of at least 1")
    return value


def _head_dims(
    d_model: int, n_heads: int, d_k: int | None, d_v: int | None, n_kv_heads: int | None
) -> tuple[int, int, int]:
    """Validated (d_k, d_v, n_kv_heads) with the defaults filled in."""
    _whole("d_model", d_model)
    _whole("n_heads", n_heads)
    if (d_k is None or d_v is None) and d_model % n_heads:
        raise ValueError(
            f"n_heads={n_heads} does not divide d_model={d_model}: pick "
            f"{or_list(divisors(d_model))}, or give d_k and d_v explicitly"
        )
    d_k = d_model // n_heads if d_k is None else _whole("d_k", d_k)
    d_v = d_model // n_heads if d_v is None else _whole("d_v", d_v)
    kv = n_heads if n_kv_heads is None else _whole("n_kv_heads", n_kv_heads)
    if n_heads % kv:
        raise ValueError(
            f"n_kv_heads={kv} does not divide n_heads={n_heads}: pick "
            f"{or_list(divisors(n_heads))} (1 = MQA, {n_heads} = MHA)"
        )
    return d_k, d_v, kv


def attention_params_breakdown(
    d_model: int,
    n_heads: int,
    d_k: int | None = None,
    d_v: int | None = None,
    n_kv_heads: int | None = None,
    bias: bool = False,
    out_proj: bool = True,
) -> dict[str, int]:
    """Learned numbers per matrix of one attention layer: W_Q [d_model, h·d_k], W_K [d_model,
    kv·d_k], W_V [d_model, kv·d_v], W_O [h·d_v, d_model], and b_* when `bias`."""
    d_k, d_v, kv = _head_dims(d_model, n_heads, d_k, d_v, n_kv_heads)
    out = {
        "W_Q": d_model * n_heads * d_k,
        "W_K": d_model * kv * d_k,
        "W_V": d_model * kv * d_v,
    }
    if out_proj:
        out["W_O"] = n_heads * d_v * d_model
    if bias:
        out |= {"b_Q": n_heads * d_k, "b_K": kv * d_k, "b_V": kv * d_v}
        if out_proj:
            out["b_O"] = d_model
    return out


def attention_params(
    d_model: int,
    n_heads: int,
    d_k: int | None = None,
    d_v: int | None = None,
    n_kv_heads: int | None = None,
    bias: bool = False,
    out_proj: bool = True,
) -> int:
    """Learned numbers of one attention layer. Note 001's single head (d_k = d_model, no W_O) is
    `attention_params(d, 1, out_proj=False)` = 3·d²; its multi-head `attention_params(d, h)` = 4·d².
    """
    return sum(
        attention_params_breakdown(d_model, n_heads, d_k, d_v, n_kv_heads, bias, out_proj).values()
    )


def transformer_params_breakdown(
    d_model: int,
    n_heads: int,
    d_ff: int,
    n_layers: int,
    vocab_size: int,
    d_k: int | None = None,
    d_v: int | None = None,
    n_kv_heads: int | None = None,
) -> dict[str, int]:
    """The encoder-decoder of Vaswani et al. 2017 (post-norm, sinusoidal positions: no learned
    position table), counted by part. One vocab_size × d_model matrix is shared by the encoder
    input, the decoder input and the pre-softmax projection (paper, section 3.4)."""
    _whole("d_ff", d_ff)
    _whole("n_layers", n_layers)
    _whole("vocab_size", vocab_size)
    attn = attention_params(d_model, n_heads, d_k, d_v, n_kv_heads, bias=True)
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model  # two linears with biases
    norm = 2 * d_model  # LayerNorm gain and bias
    return {
        "embeddings": vocab_size * d_model,
        "encoder_attention": n_layers * attn,
        "encoder_ffn": n_layers * ffn,
        "encoder_norms": n_layers * 2 * norm,
        "decoder_self_attention": n_layers * attn,
        "decoder_cross_attention": n_layers * attn,
        "decoder_ffn": n_layers * ffn,
        "decoder_norms": n_layers * 3 * norm,
    }


def transformer_params(
    d_model: int,
    n_heads: int,
    d_ff: int,
    n_layers: int,
    vocab_size: int,
    d_k: int | None = None,
    d_v: int | None = None,
    n_kv_heads: int | None = None,
) -> int:
    """Learned numbers of the 2017 encoder-decoder with n_layers encoder and n_layers decoder
    layers; see transformer_params_breakdown for what is counted."""
    return sum(
        transformer_params_breakdown(
            d_model, n_heads, d_ff, n_layers, vocab_size, d_k, d_v, n_kv_heads
        ).values()
    )


# "a shared source-target vocabulary of about 37000 tokens" (paper, section 5.1, EN-DE).
PAPER_VOCAB = 37000
_BASE = {"n_layers": 6, "d_model": 512, "d_ff": 2048, "n_heads": 8, "d_k": 64, "d_v": 64}


def _row(name: str, params_m: int | None, ppl: float, bleu: float, **changes: int) -> dict:
    return {"row": name, **_BASE, **changes, "paper_params_m": params_m, "ppl": ppl, "bleu": bleu}


# Table 3 of "Attention Is All You Need": the rows that vary N, d_model, d_ff, h, d_k, d_v (rows D
# and E change dropout, label smoothing and positions, which hold no parameters). Unlisted values
# are the base model's. ppl and bleu are on newstest2013 (dev). The paper leaves params blank in
# rows A: h·d_k = h·d_v = 512 keeps every matrix the size of the base model's, so the count is
# the base's 65M; paper_params_m is None there.
TABLE3: list[dict] = [
    _row("base", 65, 4.92, 25.8),
    _row("A", None, 5.29, 24.9, n_heads=1, d_k=512, d_v=512),
    _row("A", None, 5.00, 25.5, n_heads=4, d_k=128, d_v=128),
    _row("A", None, 4.91, 25.8, n_heads=16, d_k=32, d_v=32),
    _row("A", None, 5.01, 25.4, n_heads=32, d_k=16, d_v=16),
    _row("B", 58, 5.16, 25.1, d_k=16),
    _row("B", 60, 5.01, 25.4, d_k=32),
    _row("C", 36, 6.11, 23.7, n_layers=2),
    _row("C", 50, 5.19, 25.3, n_layers=4),
    _row("C", 80, 4.88, 25.5, n_layers=8),
    _row("C", 28, 5.75, 24.5, d_model=256, d_k=32, d_v=32),
    _row("C", 168, 4.66, 26.0, d_model=1024, d_k=128, d_v=128),
    _row("C", 53, 5.12, 25.4, d_ff=1024),
    _row("C", 90, 4.75, 26.2, d_ff=4096),
    _row("big", 213, 4.33, 26.4, d_model=1024, d_ff=4096, n_heads=16),
]


def table3_params(row: dict, vocab_size: int = PAPER_VOCAB) -> int:
    """transformer_params for one TABLE3 row."""
    return transformer_params(
        row["d_model"], row["n_heads"], row["d_ff"], row["n_layers"], vocab_size,
        d_k=row["d_k"], d_v=row["d_v"],
    )  # fmt: skip


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    seq_len: int,
    batch: int = 1,
    bytes_per_value: float = 2,
) -> int:
    """Bytes of the decoder's key/value cache: 2 (K and V) · layers · kv heads · d_head · seq_len ·
    batch · bytes_per_value (2 for fp16/bf16, 1 for int8, 0.5 for 4-bit)."""
    for name, value in (
        ("n_layers", n_layers),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("seq_len", seq_len),
        ("batch", batch),
    ):
        _whole(name, value)
    if isinstance(bytes_per_value, bool) or not isinstance(bytes_per_value, (int, float)):
        raise ValueError(f"bytes_per_value={bytes_per_value!r} must be a number above 0")
    if not bytes_per_value > 0 or not math.isfinite(bytes_per_value):
        raise ValueError(f"bytes_per_value={bytes_per_value!r} must be above 0 (2 for fp16)")
    return math.ceil(2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value)


def kv_cache_per_token(
    n_layers: int, n_kv_heads: int, d_head: int, bytes_per_value: float = 2
) -> int:
    """Bytes the KV cache grows by for each generated token of one sequence."""
    return kv_cache_bytes(n_layers, n_kv_heads, d_head, 1, 1, bytes_per_value)


def flops_attention(
    n_q: int,
    n_k: int,
    d_model: int,
    n_heads: int,
    d_head: int,
    n_kv_heads: int | None = None,
) -> dict[str, int]:
    """Rough multiply-add counts (1 multiply-add = 2 FLOPs) of one attention layer, by part.

    `softmax` counts one exponential per weight: it is the only part that grows with h at a fixed
    h·d_head, which is why h heads of width d_model/h cost about, not exactly, one full head.
    """
    _whole("n_q", n_q)
    _whole("n_k", n_k)
    _whole("d_head", d_head)
    _, _, kv = _head_dims(d_model, n_heads, d_head, d_head, n_kv_heads)
    parts = {
        "projections": d_model * d_head * (n_q * n_heads + 2 * n_k * kv),  # Q, K, V
        "qk": n_heads * n_q * n_k * d_head,  # scores = Q K^T
        "softmax": n_heads * n_q * n_k,  # one exp per weight
        "weights_v": n_heads * n_q * n_k * d_head,  # z = weights V
        "out_proj": n_q * n_heads * d_head * d_model,  # concat(z) W_O
    }
    parts["total"] = sum(parts.values())
    return parts


def multihead_shapes(
    n_tokens: int,
    d_model: int,
    n_heads: int,
    d_k: int | None = None,
    d_v: int | None = None,
    n_kv_heads: int | None = None,
    lang: str = "en",
) -> list[dict[str, str]]:
    """Every stage of one multi-head attention layer with its formula and shape, for a diagram;
    the words of the "formula" column are in `lang` (assets/i18n, keys shape.*).

    Q_i = X W_q^i; head_i = softmax(Q_i K_jᵀ / √d_k) V_j with j = i // (h / kv); Concat; · W_O.
    """
    from attnviz.i18n import translate

    _whole("n_tokens", n_tokens)
    d_k, d_v, kv = _head_dims(d_model, n_heads, d_k, d_v, n_kv_heads)
    n, h = n_tokens, n_heads

    def say(key: str, **fmt: object) -> str:
        return translate(f"shape.{key}", lang, **fmt)

    # fmt: off
    return [
        {"stage": "X", "formula": say("input"), "shape": f"{n} × {d_model}"},
        {"stage": "W_q^i", "formula": say("w_q", h=h), "shape": f"{d_model} × {d_k}"},
        {"stage": "W_k^j, W_v^j", "formula": say("w_kv", kv=kv),
         "shape": f"{d_model} × {d_k}"},
        {"stage": "Q_i = X W_q^i", "formula": say("q"), "shape": f"{n} × {d_k}"},
        {"stage": "K_j, V_j", "formula": say("kv"),
         "shape": f"{n} × {d_k}, {n} × {d_v}"},
        {"stage": "Q_i K_jᵀ / √d_k", "formula": say("scores"), "shape": f"{n} × {n}"},
        {"stage": "head_i = softmax(·) V_j", "formula": say("z"), "shape": f"{n} × {d_v}"},
        {"stage": "Concat(head_1..head_h)", "formula": say("concat"),
         "shape": f"{n} × {h * d_v}"},
        {"stage": "W_O", "formula": say("w_o"), "shape": f"{h * d_v} × {d_model}"},
        {"stage": "Concat · W_O", "formula": say("output"), "shape": f"{n} × {d_model}"},
    ]
    # fmt: on
