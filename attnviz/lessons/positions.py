"""Word order on the toy stack: what attention sees without positions (note 004: 狗咬人, 人咬狗)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnviz.engine import validate
from attnviz.engine.config import StackConfig, checked
from attnviz.engine.stack import run_stack
from attnviz.engine.tokenize import tokenize


@dataclass(frozen=True)
class OrderCheck:
    tokens_a: list[str]
    tokens_b: list[str]
    without_pe: list[float]  # per token of a: max |output(a) − output(b)| of the same token
    with_pe: list[float]


def order_blindness(text_a: str, text_b: str, config: StackConfig) -> OrderCheck:
    """Run two orderings of the same tokens with and without positional encoding and compare each
    token's final output with the same token's in the other sentence."""
    text_a, text_b = validate.text("text_a", text_a), validate.text("text_b", text_b)
    config = checked(config)
    a, b = tokenize(text_a)[: config.max_tokens], tokenize(text_b)[: config.max_tokens]
    if sorted(a) != sorted(b):
        raise ValueError(
            f"the two texts must hold the same tokens in another order: {' '.join(a)} / "
            f"{' '.join(b)}"
        )
    position_in_b = {}
    for j, tok in enumerate(b):
        position_in_b.setdefault(tok, []).append(j)
    match = [position_in_b[tok].pop(0) for tok in a]  # token i of a is token match[i] of b
    gaps = {}
    for positional in ("none", "sinusoidal"):
        cfg = replace(config, positional=positional)
        out_a = run_stack(a, cfg).hidden  # [n, d_model]
        out_b = run_stack(b, cfg).hidden  # [n, d_model]
        gaps[positional] = (out_a - out_b[match]).abs().amax(-1).tolist()  # [n]
    return OrderCheck(a, b, gaps["none"], gaps["sinusoidal"])
