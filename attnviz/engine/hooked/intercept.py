"""The attention function attnviz registers in transformers' AttentionInterface.

The per-call knobs and recorder travel as keyword arguments of `model(...)`, which transformers
forwards to the attention function: nothing per-call lives on the model, so one loaded model serves
many threads at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from attnviz.engine.attention import attend

IMPL = "attnviz"  # never "eager" or "sdpa": the registry is process-wide


@dataclass(frozen=True)
class Knobs:
    """What-if settings of one call; travels to every layer as the `attnviz_knobs` keyword."""

    use_scale: bool = True  # False: logits are raw q·k (scale 1)
    temperature: float = 1.0  # logits are divided by it
    ablate: frozenset[tuple[int, int]] = frozenset()  # (layer, head) whose z is zeroed before W_O
    mask_tokens: tuple[int, ...] = ()  # key positions no query may attend to
    # The attention blocks (layer numbers as in `ablate`) whose keys `mask_tokens` hides; None: all.
    # An encoder-decoder hides source tokens: encoder self-attention and cross-attention only.
    hide_in: frozenset[int] | None = None

    def heads_off(self, layer: int) -> list[int]:
        return sorted(h for (i, h) in self.ablate if i == layer)


@dataclass
class Recording:
    """Filled by `attnviz_attention` during one model call (travels as `attnviz_record`)."""

    layers: dict[int, dict[str, Any]] = field(default_factory=dict)
    mask: torch.Tensor | None = None  # the last layer's bool mask, broadcastable to [b, h, q, k]
    # id(attention module) -> its layer number in `layers` and `Knobs.ablate`; modules not in it use
    # their own `layer_idx` (an encoder-decoder numbers encoder, decoder and cross blocks apart).
    blocks: dict[int, int] = field(default_factory=dict)


def _may_attend(
    attention_mask: torch.Tensor | None, mask_tokens: Sequence[int], n_k: int, device: torch.device
) -> torch.Tensor | None:
    """The bool "may attend" mask from transformers' mask (eager: 0 = attend, dtype min = not)."""
    mask = None
    if attention_mask is not None:
        mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    if mask_tokens:
        keep = torch.ones(n_k, dtype=torch.bool, device=device)  # [k]
        keep[list(mask_tokens)] = False
        mask = keep.view(1, 1, 1, n_k) if mask is None else mask & keep  # [batch|1, 1, q|1, k]
    return mask


def attnviz_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    attnviz_knobs: Knobs | None = None,
    attnviz_record: Recording | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention through `attend`, with the call's knobs applied and its tensors recorded.

    Same contract as transformers' eager_attention_forward: query, key, value [batch, head, pos,
    d_head] in; (output [batch, q, head, d_head], weights [batch, head, q, k]) out. Inference only:
    dropout is not applied. Without knobs and recorder it is plain eager attention.
    """
    for name in ("position_bias", "softcap", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{type(module).__name__} passes {name} to its attention: attnviz's softmax(q·k·"
                f"scale) would drop it, so this model is not supported"
            )
    knobs = attnviz_knobs or Knobs()
    block = module.layer_idx
    if attnviz_record is not None:
        block = attnviz_record.blocks.get(id(module), block)
    model_scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scale = (model_scale if knobs.use_scale else 1.0) / knobs.temperature
    hidden = knobs.mask_tokens if knobs.hide_in is None or block in knobs.hide_in else ()
    mask = _may_attend(attention_mask, hidden, key.shape[-2], key.device)
    out = attend(query, key, value, mask, scale)
    z = out.z  # [batch, head, q, d_head]
    off = knobs.heads_off(block)
    if off:
        z = z.index_fill(1, torch.tensor(off, device=z.device), 0.0)  # [batch, head, q, d_head]
    if attnviz_record is not None:
        attnviz_record.mask = mask
        attnviz_record.layers[block] = {
            "q": query,
            "k": key,
            "v": value,
            "scores": out.scores,
            "weights": out.weights,
            "z": z,
            "scale": scale,
            "mask": mask,  # bool [batch|1, 1, q|1, k] or None
        }
    return z.transpose(1, 2), out.weights  # [batch, q, head, d_head], [batch, head, q, k]


AttentionInterface.register(IMPL, attnviz_attention)
# Without a mask function under the same name transformers builds no padding mask at all.
AttentionMaskInterface.register(IMPL, eager_mask)
