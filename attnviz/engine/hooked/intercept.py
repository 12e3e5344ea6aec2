"""The attention function attnviz registers in transformers' AttentionInterface.

The per-call knobs and recorder travel as keyword arguments of `model(...)`, which transformers
forwards to the attention function: nothing per-call lives on the model, so one loaded model serves
many threads at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from attnviz.engine.collector import paused

with paused():  # transformers' model code: ~10^6 objects (engine/collector.py)
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, prepare_padding_mask, sdpa_mask

from attnviz.engine.attention import attend
from attnviz.engine.lean import MaskRule, attend_lean
from attnviz.engine.request import Knobs

IMPL = "attnviz"  # never "eager" or "sdpa": the registry is process-wide


@dataclass(eq=False)
class LayerRecord:
    """One attention block's tensors from one forward, batch first, where and as the model
    computed them (its device and dtype). A full record holds the n x n scores, weights and mask;
    a lean one (Knobs.lean) the mask rule and the per-row log-sum-exp instead. `output`, `x` and
    `f_norm` are added after the forward (attnviz.engine.hooked.forward)."""

    q: torch.Tensor  # [batch, head, q, d_head]
    k: torch.Tensor  # [batch, kv_head, k, d_head]
    v: torch.Tensor  # [batch, kv_head, k, d_head]
    z: torch.Tensor  # [batch, head, q, d_head] silenced heads zeroed
    scale: float  # the factor the scores were multiplied by (knobs included)
    scores: torch.Tensor | None = None  # [batch, head, q, k] raw q·k (full)
    weights: torch.Tensor | None = None  # [batch, head, q, k] (full)
    mask: torch.Tensor | None = None  # bool [batch|1, 1, q|1, k], True = may attend; None: all
    rule: MaskRule | None = None  # the mask as a rule (lean)
    lse: torch.Tensor | None = None  # [batch, head, q] per-row log-sum-exp (lean)
    output: torch.Tensor | None = None  # [batch, q, d_model] after W_O
    x: torch.Tensor | None = None  # [batch, q, d_model] the block's input (post-LN families)
    f_norm: torch.Tensor | None = None  # [batch, head, k] ||W_O^h v_j||

    @property
    def lean(self) -> bool:
        return self.rule is not None


@dataclass
class Recording:
    """Filled by `attnviz_attention` during one model call (travels in `Call.record`)."""

    layers: dict[int, LayerRecord] = field(default_factory=dict)
    # id(attention module) -> its layer number in `layers` and `Knobs.ablate`; modules not in it use
    # their own `layer_idx` (an encoder-decoder numbers encoder, decoder and cross blocks apart).
    blocks: dict[int, int] = field(default_factory=dict)
    # id(W_O module) -> its output [batch, q, d_model], caught while this recording is `active`
    outputs: dict[int, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Call:
    """What one model call gives attnviz's attention function, as the `attnviz_call` keyword of
    `model(...)`: its what-if knobs and, where tensors are wanted, the recording to fill."""

    knobs: Knobs = field(default_factory=Knobs)
    record: Recording | None = None


# The recording of the forward running in this thread (or context), for the W_O hooks.
_ACTIVE: ContextVar[Recording | None] = ContextVar("attnviz_recording", default=None)


@contextmanager
def active(record: Recording) -> Iterator[Recording]:
    """Within the block, the W_O modules hooked by `catch_outputs` keep their outputs in
    `record.outputs` (this thread's forward only: a ContextVar, nothing on the model)."""
    token = _ACTIVE.set(record)
    try:
        yield record
    finally:
        _ACTIVE.reset(token)


def catch_outputs(w_o_modules: Iterable[torch.nn.Module]) -> None:
    """Hook each W_O module once (for good: the hook does nothing outside `active`), so a trace
    keeps the block outputs the model computed instead of projecting z through W_O again (a
    tenth of a decoder's trace at 128 tokens)."""
    for module in w_o_modules:
        if not getattr(module, "_attnviz_catches", False):
            module.register_forward_hook(_catch)
            module._attnviz_catches = True


def _catch(module: torch.nn.Module, args: Any, output: Any) -> None:
    record = _ACTIVE.get()
    if record is not None and isinstance(output, torch.Tensor):
        record.outputs[id(module)] = output


@dataclass(frozen=True)
class DeferredMask:
    """What attnviz's mask function gives the model instead of an n x n tensor: the arguments of
    transformers' mask (its rule `mask_function`, the 2D padding mask, the lengths), made into a
    bool tensor only where a full trace needs one, or read as a MaskRule by a lean one."""

    args: dict[str, Any]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        a = self.args
        return (a["batch_size"], 1, a["q_length"], a["kv_length"])

    def tensor(self) -> torch.Tensor | None:
        """bool [batch, 1, q, k], True = may attend (transformers' own sdpa_mask); built once,
        for every layer this mask is given to."""
        return self._tensor

    @cached_property
    def _tensor(self) -> torch.Tensor | None:
        return sdpa_mask(**self.args, allow_is_causal_skip=False)

    def rule(self, causal: bool, window: int | None) -> MaskRule | None:
        """The MaskRule (causal, window, padding) that equals this mask, or None when none of
        that shape does; checked against transformers' mask function on sampled rows."""
        a = self.args
        n_q, n_k, b = a["q_length"], a["kv_length"], a["batch_size"]
        padding = prepare_padding_mask(a.get("attention_mask"), n_k, a.get("kv_offset", 0))
        keys = None if padding is None or bool(padding.all()) else padding.bool()  # [b, k]
        rule = MaskRule(
            n_q, n_k, causal, window, keys, a.get("q_offset", 0) - a.get("kv_offset", 0)
        )
        fn, dev = a["mask_function"], a.get("device", "cpu")
        rows = torch.unique(torch.cat([torch.arange(min(n_q, 16)), torch.arange(n_q)[-16:],
                                       torch.randint(n_q, (16,))]))  # fmt: skip
        cols = torch.arange(n_k, device=dev)
        for i in range(b):
            try:
                want = fn(torch.tensor(i), torch.tensor(0), rows.to(dev).view(-1, 1) + a.get(
                    "q_offset", 0), cols.view(1, -1) + a.get("kv_offset", 0))  # fmt: skip
            except Exception:  # a rule transformers can only vmap: not a MaskRule
                return None
            want = torch.as_tensor(want, device=dev).expand(len(rows), n_k)  # [r, k]
            if padding is not None:
                want = want & padding[i].to(dev).bool()
            if not torch.equal(want.cpu(), rule.allowed(rows, cols.cpu(), i).cpu()):
                return None
        return rule


def attnviz_mask(**kwargs: Any) -> DeferredMask:
    """attnviz's mask function: defers the mask (DeferredMask) so that no n x n tensor is built
    for a long input; the attention function makes it a tensor or a rule."""
    kwargs.pop("allow_is_causal_skip", None)
    kwargs.pop("dtype", None)
    kwargs.pop("config", None)
    return DeferredMask(kwargs)


def _may_attend(
    attention_mask: torch.Tensor | None, mask_tokens: Sequence[int], n_k: int, device: torch.device
) -> torch.Tensor | None:
    """The bool "may attend" mask from transformers' mask (eager: 0 = attend, dtype min = not)."""
    mask = None
    if isinstance(attention_mask, DeferredMask):
        attention_mask = attention_mask.tensor()
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
    attnviz_call: Call | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention through `attend`, with the call's knobs applied and its tensors recorded.

    Same contract as transformers' eager_attention_forward: query, key, value [batch, head, pos,
    d_head] in; (output [batch, q, head, d_head], weights [batch, head, q, k]) out. Inference only:
    dropout is not applied. Without `attnviz_call` it is plain eager attention.
    """
    for name in ("position_bias", "softcap", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise ValueError(
                f"{type(module).__name__} passes {name} to its attention: attnviz's softmax(q·k·"
                f"scale) would drop it, so this model is not supported"
            )
    call = attnviz_call or Call()
    knobs, record = call.knobs, call.record
    block = module.layer_idx if record is None else record.blocks.get(id(module), module.layer_idx)
    model_scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scale = (model_scale if knobs.use_scale else 1.0) / knobs.temperature
    hidden = knobs.mask_tokens if knobs.hide_in is None or block in knobs.hide_in else ()
    if knobs.lean:
        rule = _rule(module, attention_mask, hidden, query, key, kwargs.get("sliding_window"))
        if rule is not None:
            z, lse = attend_lean(query, key, value, rule, scale)  # [b, head, q, d], [b, head, q]
            z = _silence(z, knobs.heads_off(block))
            if record is not None:
                record.layers[block] = LayerRecord(query, key, value, z, scale, rule=rule, lse=lse)
            return z.transpose(1, 2), None  # [batch, q, head, d_head]; no weights returned
    mask = _may_attend(attention_mask, hidden, key.shape[-2], key.device)
    out = attend(query, key, value, mask, scale)
    z = _silence(out.z, knobs.heads_off(block))  # [batch, head, q, d_head]
    if record is not None:
        record.layers[block] = LayerRecord(
            query, key, value, z, scale, scores=out.scores, weights=out.weights, mask=mask
        )
    return z.transpose(1, 2), out.weights  # [batch, q, head, d_head], [batch, head, q, k]


def _silence(z: torch.Tensor, off: list[int]) -> torch.Tensor:
    """z with the silenced heads zeroed before W_O. [batch, head, q, d_head]"""
    if not off:
        return z
    return z.index_fill(1, torch.tensor(off, device=z.device), 0.0)


def _rule(
    module: torch.nn.Module,
    attention_mask: object,
    hidden: Sequence[int],
    query: torch.Tensor,
    key: torch.Tensor,
    window: int | None,
) -> MaskRule | None:
    """The mask of this call as a MaskRule (hidden keys included), or None when it is not one."""
    b, n_q, n_k = query.shape[0], query.shape[-2], key.shape[-2]
    if attention_mask is None:
        rule = MaskRule(n_q, n_k)
    elif isinstance(attention_mask, DeferredMask):
        rule = attention_mask.rule(bool(getattr(module, "is_causal", False)), window)
        if rule is None:
            return None
    else:
        return None
    if hidden:
        keys = torch.ones(b, n_k, dtype=torch.bool) if rule.keys is None else rule.keys.clone()
        keys[:, list(hidden)] = False  # [b, k]
        rule = MaskRule(rule.n_q, n_k, rule.causal, rule.window, keys, rule.q_offset)
    return rule


AttentionInterface.register(IMPL, attnviz_attention)
# Without a mask function under the same name transformers builds no padding mask at all; ours
# defers it (DeferredMask), so a long input never builds an n x n mask.
AttentionMaskInterface.register(IMPL, attnviz_mask)
