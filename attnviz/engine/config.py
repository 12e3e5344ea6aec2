"""StackConfig: the frozen, validated description of the toy attention stack."""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.engine import validate
from attnviz.engine.budget import check_stack_weights

POSITIONAL = ("sinusoidal", "none")
MAX_SIZE = 4096  # largest d_model / d_head / d_ff the toy stack accepts
MAX_LAYERS = 24
MAX_TOKENS = 512


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def or_list(xs: list[int]) -> str:
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " or " + xs[-1]


@dataclass(frozen=True)
class StackConfig:
    """The configurable multi-head attention stack; invalid combinations raise ValueError.

    One name per quantity: a None for d_head, n_kv_heads or d_ff is replaced by its default at
    construction, so `config.d_head` is always the head size. `dataclasses.replace` keeps them:
    pass d_head=None (etc.) again to have them follow a new d_model or n_heads.
    """

    d_model: int = 64  # width of the token vectors
    n_heads: int = 4  # query heads h
    d_head: int | None = None  # d_k = d_v per head; None: d_model // n_heads
    n_kv_heads: int | None = None  # K/V heads; None: n_heads (MHA); 1: MQA; a divisor: GQA
    n_layers: int = 1  # attention blocks stacked
    use_scale: bool = True  # divide scores by sqrt(d_head)
    temperature: float = 1.0  # logits are further divided by this
    causal: bool = False  # query i may attend to keys 0..i only (self-attention)
    positional: str = "sinusoidal"  # "sinusoidal" or "none"
    add_norm: bool = False  # residual + LayerNorm after each sublayer (post-norm, as the paper)
    ffn: bool = False  # a position-wise feed-forward sublayer after attention
    d_ff: int | None = None  # FFN hidden width; None: 4 * d_model
    share_weights: bool = False  # every layer uses layer 0's weights (ALBERT-style)
    seed: int = 0  # embeddings and weights are drawn from this
    max_tokens: int = MAX_TOKENS  # longer input is truncated, and the Trace says so

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "n_layers"):
            validate.whole(name, getattr(self, name), 1)
        validate.whole("max_tokens", self.max_tokens, 1, MAX_TOKENS)
        for name in ("d_head", "n_kv_heads", "d_ff"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{name}={value!r} must be a whole number or None")
            if value is not None and value < 1:
                raise ValueError(f"{name}={value} must be at least 1 (or None for the default)")
        for name in ("use_scale", "causal", "add_norm", "ffn", "share_weights"):
            validate.flag(name, getattr(self, name))
        validate.whole("seed", self.seed, -(2**63), 2**63 - 1)
        for name in ("d_model", "d_head"):
            value = getattr(self, name)
            if value is not None and value > MAX_SIZE:
                raise ValueError(
                    f"{name}={value} is too large for the toy stack: keep it <= {MAX_SIZE}"
                )
        d_head = self.d_head if self.d_head is not None else self.d_model // self.n_heads
        kv = self.n_kv_heads if self.n_kv_heads is not None else self.n_heads
        d_ff = self.d_ff if self.d_ff is not None else 4 * self.d_model
        if self.ffn and d_ff > MAX_SIZE:
            how = "" if self.d_ff is not None else f" (the default, 4 * d_model={self.d_model})"
            raise ValueError(
                f"d_ff={d_ff}{how} is too large for the toy stack: set d_ff <= {MAX_SIZE}"
            )
        if self.n_layers > MAX_LAYERS:
            raise ValueError(f"n_layers={self.n_layers} is too many: keep it <= {MAX_LAYERS}")
        if self.d_head is None and self.d_model % self.n_heads:
            options = [h for h in divisors(self.d_model) if h <= 64]
            raise ValueError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}: pick "
                f"{or_list(options)}, or set d_head explicitly"
            )
        if self.n_heads > 256:
            raise ValueError(f"n_heads={self.n_heads} is too many: keep it <= 256")
        if kv > self.n_heads or self.n_heads % kv:
            raise ValueError(
                f"n_kv_heads={kv} does not divide n_heads={self.n_heads}: pick "
                f"{or_list(divisors(self.n_heads))} (1 = MQA, {self.n_heads} = MHA)"
            )
        object.__setattr__(self, "d_head", d_head)
        object.__setattr__(self, "n_kv_heads", kv)
        object.__setattr__(self, "d_ff", d_ff)
        object.__setattr__(self, "temperature", validate.temperature(self.temperature))
        if not isinstance(self.positional, str) or self.positional not in POSITIONAL:
            raise ValueError(
                f"positional={validate.short(self.positional)}: pick one of {', '.join(POSITIONAL)}"
            )
        check_stack_weights(self)

    @property
    def scale(self) -> float:
        """The factor applied to q·k: 1/sqrt(d_head) (or 1 unscaled), divided by the temperature."""
        base = self.d_head**-0.5 if self.use_scale else 1.0
        return base / self.temperature

    @property
    def sharing(self) -> str:
        """ "MHA", "MQA" or "GQA"."""
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"


def checked(value: object) -> StackConfig:
    """`value` when it is a StackConfig, else a TypeError that says what to pass."""
    if not isinstance(value, StackConfig):
        raise TypeError(f"config must be a StackConfig, not {type(value).__name__}")
    return value
