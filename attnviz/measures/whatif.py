"""What a what-if changed, compared with the unchanged model: weights, outputs, the embedding.

Silencing head (l, h) zeroes its z before W_O: its own weights, and every weight of layers up to
l, stay exactly as they were; what moves is the block's output, then the weights of the layers
after l, then each token's final hidden state and the sentence embedding. `compare` measures all
of it so the page can show what changed instead of an all-zero grid. No streamlit here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnviz.engine.trace import Trace
from attnviz.measures.stats import weight_shift

_HEAD_ID = re.compile(r"^L(\d+)H(\d+)$")
MOVED = 1e-6  # a total-variation shift below this is float noise, not a change


def head_ids(n_layers: int, n_heads: int) -> list[str]:
    """ "L{layer}H{head}" for every head, the names the page and the URL use."""
    return [f"L{la}H{h}" for la in range(n_layers) for h in range(n_heads)]


def parse_head_ids(ids: list[str] | tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """("L5H11", ...) -> ((5, 11), ...); a malformed id raises ValueError naming it."""
    heads = []
    for name in ids:
        match = _HEAD_ID.match(str(name))
        if match is None:
            raise ValueError(f"{name!r} is not a head id: write it as L<layer>H<head>, e.g. L5H11")
        heads.append((int(match.group(1)), int(match.group(2))))
    return tuple(heads)


@dataclass(frozen=True)
class WhatIf:
    """How far a changed trace is from the unchanged one.

    | field        | shape          | meaning                                                   |
    |--------------|----------------|-----------------------------------------------------------|
    | shift        | [layer, head]  | mean over queries of the total variation of the weights   |
    | token_change | [n]            | ‖h_new − h_base‖ / ‖h_base‖ of each final hidden state     |
    | layer_change | [layer, n]     | the same for each layer's attention output (after W_O)    |
    | cosine       | float          | cosine of the two sentence embeddings (1: no change)      |
    | silenced     | ((l, h), ...)  | the heads whose z was zeroed                              |
    """

    shift: torch.Tensor
    token_change: torch.Tensor
    layer_change: torch.Tensor
    cosine: float
    silenced: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if self.shift.dim() != 2 or self.layer_change.shape[0] != self.shift.shape[0]:
            raise ValueError("shift must be [layer, head] and layer_change [layer, n]")

    @property
    def first_moved_layer(self) -> int | None:
        """The first layer any of whose weights moved, or None if no weight moved."""
        moved = (self.shift > MOVED).any(dim=1).nonzero()
        return int(moved[0]) if moved.numel() else None

    @property
    def heads_moved(self) -> int:
        return int((self.shift > MOVED).sum())

    @property
    def most_changed_token(self) -> int:
        return int(self.token_change.argmax())

    @property
    def silenced_only_later(self) -> bool:
        """True when every silenced head sits in the last layer: no weight can move at all."""
        last = self.shift.shape[0] - 1
        return bool(self.silenced) and all(la == last for la, _ in self.silenced)


def _relative_change(new: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    # [..., n, d] -> [..., n]: the change of each token's vector, relative to its unchanged size
    return (new - base).norm(dim=-1) / base.norm(dim=-1).clamp_min(1e-12)


def compare(new: Trace, base: Trace) -> WhatIf:
    """Everything that moved between `base` (the unchanged model) and `new` (with the knobs)."""
    if new.tokens != base.tokens:
        raise ValueError("the two traces must be of the same tokens")
    if new.hidden is None or base.hidden is None or new.embedding is None:
        raise ValueError("both traces need hidden states and an embedding: use trace_model()")
    outputs_new = torch.stack([lt.output for lt in new.layers])  # [layer, n, d_model]
    outputs_base = torch.stack([lt.output for lt in base.layers])  # [layer, n, d_model]
    return WhatIf(
        shift=weight_shift(new, base),  # [layer, head]
        token_change=_relative_change(new.hidden, base.hidden),  # [n]
        layer_change=_relative_change(outputs_new, outputs_base),  # [layer, n]
        cosine=float(F.cosine_similarity(new.embedding, base.embedding, dim=0)),
        silenced=tuple(tuple(x) for x in new.meta.get("ablate", ())),
    )
