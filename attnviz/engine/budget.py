"""The resource budget of one server, in one place: every limit on tokens, bytes and work.

Defaults fit a classroom server (2 cores, a few GB for attnviz). Each limit can be changed with an
environment variable named in its comment, read once per process. The engine checks a request
against it before doing the work and refuses what is over with a ValueError that names the size.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, fields
from functools import cache

from attnviz.i18n import Message

MiB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class Budget:
    # ATTNVIZ_MAX_TOKENS: tokens in one input (both sentences together); the byte and work limits
    # below decide what a given model can take (8,192 tokens for a small model on 2 cores)
    max_tokens: int = 32_768
    max_weight_bytes: int = 1 * GiB  # ATTNVIZ_MAX_WEIGHT_BYTES: the toy stack's weights, all layers
    max_trace_bytes: int = 512 * MiB  # ATTNVIZ_MAX_TRACE_BYTES: the tensors of one trace
    max_model_bytes: int = 8 * GiB  # ATTNVIZ_MAX_MODEL_BYTES: a pretrained model's parameters
    max_text_chars: int = 100_000  # ATTNVIZ_MAX_TEXT_CHARS: characters in one sentence
    max_work: int = 100 * 10**9  # ATTNVIZ_MAX_WORK: floating-point operations of one trace
    # ATTNVIZ_FULL_TRACE_BYTES: a pretrained-model trace whose n x n tensors would be over this is
    # lean (q, k, v, z, the mask rule, log-sum-exp; weights recomputed on access)
    full_trace_bytes: int = 256 * MiB
    max_model_work: int = 2 * 10**12  # ATTNVIZ_MAX_MODEL_WORK: floating-point ops of one forward
    # ATTNVIZ_MAX_SWEEP_WORK: floating-point ops of one patching sweep, all its forwards together
    # (measures/patching.py: SmolLM2's 270 heads at 32 tokens are 2.4 * 10^12)
    max_sweep_work: int = 20 * 10**12
    # The training lab shares the server's cores with every other page: a run's wall-clock limit
    # in seconds (ATTNVIZ_LAB_SECONDS); how many run at once is attnviz.serve.settings'
    lab_seconds: int = 60
    # ATTNVIZ_MAX_ATLAS_BYTES: a saved corpus atlas (atlas.parquet) the Atlas page opens, an upload
    # or a file under ATTNVIZ_ATLAS_DIR (attnviz.serve.corpus)
    max_atlas_bytes: int = 64 * MiB

    def __post_init__(self) -> None:
        positive_fields(self, "budget")


def positive_fields(obj, what: str) -> None:
    """Every field of a dataclass of limits is a positive whole number, else a ValueError."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{what} {f.name}={value!r} must be a positive whole number")


TRUE = ("1", "true", "yes", "on")
PUBLIC_LIMITS = {
    "max_tokens": 256,
    "max_text_chars": 20_000,
    "max_model_work": 10**11,
    "max_sweep_work": 4 * 10**12,
    "max_atlas_bytes": 16 * MiB,
}  # unless ATTNVIZ_* set them


def public() -> bool:
    """Public mode (a server a whole class or the internet can reach): ATTNVIZ_PUBLIC is 1 / true /
    yes / on. It lowers the token and text limits (PUBLIC_LIMITS) unless they are set explicitly;
    attnviz.serve.public holds the rest of its policy (which models a page may offer)."""
    return os.environ.get("ATTNVIZ_PUBLIC", "").strip().lower() in TRUE


def from_env(cls: type | None = None, defaults: dict[str, int] | None = None) -> dict[str, int]:
    """The ATTNVIZ_<FIELD> environment variables set for the fields of `cls` (default: Budget),
    over `defaults` (default: public mode's lower limits where it is on)."""
    cls = cls or Budget
    if defaults is None:
        defaults = dict(PUBLIC_LIMITS) if public() else {}
    found = dict(defaults)
    for f in fields(cls):
        raw = os.environ.get(f"ATTNVIZ_{f.name.upper()}")
        if raw is None or not raw.strip():
            continue
        try:
            found[f.name] = int(raw)
        except ValueError as e:
            raise ValueError(f"ATTNVIZ_{f.name.upper()}={raw!r} must be a whole number") from e
    return found


@cache
def budget() -> Budget:
    """This process's budget: the defaults, overridden by ATTNVIZ_* environment variables."""
    return Budget(**from_env())


def size(n_bytes: float, gib_digits: int = 1) -> str:
    """Bytes for a message: '16.0 GiB', '12.5 MiB', '900 bytes' (`gib_digits` decimals in GiB:
    a model's parameters are told apart at 2)."""
    for unit, factor, digits in (("GiB", GiB, gib_digits), ("MiB", MiB, 1), ("KiB", 2**10, 1)):
        if n_bytes >= factor:
            return f"{n_bytes / factor:.{digits}f} {unit}"
    return f"{int(n_bytes)} bytes"


def work(flops: float) -> str:
    return f"{flops / 1e9:.1f} GFLOP"


FLOAT = 4  # every tensor is float32


def stack_weight_bytes(config) -> int:
    """The toy stack's weights (a StackConfig), all distinct layers, before any is built."""
    d, h, kv, dh = config.d_model, config.n_heads, config.n_kv_heads, config.d_head
    per_layer = d * h * dh + 2 * d * kv * dh + h * dh * d  # W_q, W_k, W_v, W_O
    if config.ffn:
        per_layer += 2 * d * config.d_ff  # W_1, W_2
    return FLOAT * per_layer * (1 if config.share_weights else config.n_layers)


def stack_trace_bytes(config, n_q: int, n_k: int) -> int:
    """Every tensor a trace keeps (q, k, v, scores, weights, z, output, x per layer), plus the
    largest temporaries of one layer (K/V expanded to every head, the logits, the FFN hidden)."""
    d, h, kv, dh = config.d_model, config.n_heads, config.n_kv_heads, config.d_head
    kept = h * n_q * dh * 2 + kv * n_k * dh * 2 + h * n_q * n_k * 2 + n_q * d * 2
    temporary = h * n_k * dh * 2 * (kv < h) + h * n_q * n_k + n_q * h * dh
    if config.ffn:
        temporary += n_q * config.d_ff
    return FLOAT * (kept * config.n_layers + temporary) + n_q * n_k  # + the bool mask


def stack_work(config, n_q: int, n_k: int) -> int:
    """Floating-point operations of one trace (a multiply-add counts 2)."""
    d, h, kv, dh = config.d_model, config.n_heads, config.n_kv_heads, config.d_head
    per_layer = 2 * n_q * d * h * dh + 4 * n_k * d * kv * dh  # projections
    per_layer += 4 * h * n_q * n_k * dh  # q·k and weights @ v
    per_layer += 2 * n_q * h * dh * d  # W_O
    if config.ffn:
        per_layer += 4 * n_q * d * config.d_ff
    return per_layer * config.n_layers


def check_stack_weights(config) -> None:
    """Refuse a StackConfig whose weights alone are over the budget (before building them)."""
    need, limit = stack_weight_bytes(config), budget().max_weight_bytes
    if need > limit:
        raise ValueError(
            f"these settings need {size(need)} of weights (d_model={config.d_model}, "
            f"{config.n_heads} heads of d_head={config.d_head}, n_layers={config.n_layers}); "
            f"this server allows {size(limit)}: use fewer heads, a smaller d_head or fewer layers"
        )


def check_stack_run(config, n_q: int, n_k: int) -> None:
    """Refuse a toy-stack trace of n_q queries and n_k keys that is over the budget."""
    check_stack_weights(config)
    need, limit = stack_trace_bytes(config, n_q, n_k), budget().max_trace_bytes
    if need > limit:
        raise ValueError(
            f"a trace of {n_q} tokens with these settings needs {size(need)}; this server "
            f"allows {size(limit)}: use a shorter text, fewer heads, a smaller d_head or fewer "
            f"layers"
        )
    flops, most = stack_work(config, n_q, n_k), budget().max_work
    if flops > most:
        raise ValueError(
            f"a trace of {n_q} tokens with these settings is {work(flops)} of work; this server "
            f"allows {work(most)}: use a shorter text, a smaller model or fewer layers"
        )


def model_trace_bytes(n_layers: int, n_heads: int, d_head: int, batch: int, n: int) -> int:
    """A pretrained model's full trace: q, k, v, z, scores, weights, output and hidden per layer."""
    d = n_heads * d_head
    per_layer = batch * (4 * n_heads * n * d_head + 2 * n_heads * n * n + 2 * n * d)
    return FLOAT * (per_layer * n_layers + batch * n_heads * n * n)  # + one layer's logits


def model_lean_bytes(
    n_layers: int, n_heads: int, n_kv_heads: int, d_head: int, batch: int, n: int
) -> int:
    """A lean trace (attnviz.engine.lean): q, z, k, v, lse, output and hidden per layer, plus one
    query block's logits while recording. Grows with n, not n²."""
    from attnviz.engine.lean import BLOCK_CELLS

    d = n_heads * d_head
    per_layer = batch * (2 * n_heads * n * d_head + 2 * n_kv_heads * n * d_head + n_heads * n)
    per_layer += batch * 2 * n * d
    return FLOAT * (per_layer * n_layers + batch * BLOCK_CELLS)


def lean_trace(model, batch: int, n: int) -> bool:
    """THE decision between a full trace (every head's n x n scores and weights kept: fastest for
    the views) and a lean one (recomputed on access): by the bytes of the full one."""
    full = model_trace_bytes(model.n_layers, model.n_heads, model.d_head, batch, n)
    return full > budget().full_trace_bytes


def model_trace_need(model, batch: int, n: int) -> int:
    """Bytes of the trace tracing will record for `batch` inputs of n tokens (full or lean)."""
    if not lean_trace(model, batch, n):
        return model_trace_bytes(model.n_layers, model.n_heads, model.d_head, batch, n)
    kv = getattr(model, "n_kv_heads", None) or model.n_heads
    return model_lean_bytes(model.n_layers, model.n_heads, kv, model.d_head, batch, n)


_PARAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a module -> its parameters


def _n_params(module) -> int:
    """The parameters of a loaded model's module, counted once (every request weighs its work,
    a binary search of ~10 calls over the 272 tensors of SmolLM2: ~2.5 ms a sentence)."""
    n = _PARAMS.get(module)
    if n is None:
        n = _PARAMS[module] = sum(p.numel() for p in module.parameters())
    return n


def model_work(model, batch: int, n: int) -> int:
    """Floating-point operations of one forward: 2 per parameter per token, plus q·k and
    weights @ v in every layer (a multiply-add counts 2)."""
    inner = getattr(model, "model", None)
    params = _n_params(inner) if hasattr(inner, "parameters") else 0
    attention = 4 * model.n_layers * model.n_heads * n * n * model.d_head
    return batch * (2 * params * n + attention)


def longest_input(model, batch: int = 1) -> int:
    """The most tokens this server's budget lets `model` trace (bytes and work), at most its own
    limit and max_tokens: what the page offers."""
    lo, hi = 1, max(1, min(model.max_length, budget().max_tokens))

    def fits(n: int) -> bool:
        need = model_trace_need(model, batch, n)
        return need <= budget().max_trace_bytes and model_work(model, batch, n) <= (
            budget().max_model_work
        )

    if fits(hi):
        return hi
    while lo < hi:  # the largest n that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def check_model_trace(model, batch: int, n: int) -> None:
    """Refuse a batch of `batch` inputs of n tokens (their real length) over the budget."""
    need = model_trace_need(model, batch, n)
    limit = budget().max_trace_bytes
    if need > limit:
        raise ValueError(Message(
            "budget.trace_bytes", batch=batch, n=n, layers=model.n_layers, need=size(need),
            limit=size(limit), fits=longest_input(model, batch),
        ))  # fmt: skip
    flops, most = model_work(model, batch, n), budget().max_model_work
    if flops > most:
        raise ValueError(Message(
            "budget.trace_work", batch=batch, n=n, layers=model.n_layers, work=work(flops),
            most=work(most), fits=longest_input(model, batch),
        ))  # fmt: skip


def rollout_bytes(n_layers: int, n_heads: int, n: int) -> int:
    """Attention rollout of n tokens: every layer's [n, n] product in float64, two temporaries,
    and one layer's weights of every head (a lean trace recomputes them)."""
    return 8 * n * n * (n_layers + 2) + FLOAT * n_heads * n * n


def check_rollout(n_layers: int, n_heads: int, n: int) -> None:
    """Refuse a rollout over the trace budget, saying what it needs and what fits."""
    need, limit = rollout_bytes(n_layers, n_heads, n), budget().max_trace_bytes
    if need > limit:
        fits = int((limit / (8 * (n_layers + 2) + FLOAT * n_heads)) ** 0.5)
        raise ValueError(Message(
            "budget.rollout", layers=n_layers, n=f"{n:,}", need=size(need), limit=size(limit),
            fits=f"{fits:,}",
        ))  # fmt: skip
