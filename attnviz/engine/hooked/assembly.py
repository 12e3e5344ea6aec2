"""The assembly step of a trace: what one forward recorded (forward.Recorded) turned into one
Trace per input of its batch. Every layer is built from its block's LayerRecord in one function,
`layer_from_record`, full or lean as it was recorded.

The tensors stay where the model computed them (a GPU, bfloat16): LayerTrace converts on access
(attnviz.engine.trace), so a view copies to the CPU only what it draws.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from attnviz.engine.budget import budget
from attnviz.engine.hooked.encoding import special_positions
from attnviz.engine.hooked.families import CROSS, DECODER
from attnviz.engine.hooked.forward import Batch, Recorded
from attnviz.engine.hooked.intercept import LayerRecord
from attnviz.engine.hooked.labels import token_labels
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.stream import keep_stream
from attnviz.engine.lean import lean_scores, lean_weights
from attnviz.engine.request import Knobs
from attnviz.engine.trace import LayerTrace, Trace


@dataclass(frozen=True)
class Cut:
    """What one trace reads of a batch: row `b`, its first `n_q` queries and `n_k` keys; and how
    it keeps what it reads: a copy of its own (`copy`) when it is cut from a shared batch, and
    converted to CPU float32 where read eagerly unless it is that already (`on_cpu`)."""

    b: int
    n_q: int
    n_k: int
    copy: bool = False
    on_cpu: bool = True

    def own(self, t: torch.Tensor) -> torch.Tensor:
        # A trimmed trace of a batch owns its tensors: a view would keep the whole batch alive
        # (and a byte-bounded cache would count only the view).
        return t.clone() if self.copy else t

    def cpu(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.on_cpu else t.to("cpu", torch.float32)

    def sized(self, n_q: int, n_k: int) -> Cut:
        return replace(self, n_q=n_q, n_k=n_k)


def layer_from_record(record: LayerRecord, cut: Cut, masks: list[torch.Tensor]) -> LayerTrace:
    """One block's LayerTrace for one input (`cut`): lean (nothing n x n; scores and weights
    recomputed on access from the mask rule and the log-sum-exp) when it was recorded lean, else
    full, its mask one of `masks` when equal to one (the input's layers share equal masks)."""
    b, n_q, n_k, own = cut.b, cut.n_q, cut.n_k, cut.own
    common = dict(
        q=own(record.q[b, :, :n_q]),  # [head, n_q, d_head]
        k=own(record.k[b, :, :n_k]),  # [kv_head, n_k, d_head]
        v=own(record.v[b, :, :n_k]),  # [kv_head, n_k, d_head]
        scale=float(record.scale),
        z=own(record.z[b, :, :n_q]),  # [head, n_q, d_head]
        output=own(record.output[b, :n_q]),  # [n_q, d_model]
        x=None if record.x is None else own(record.x[b, :n_q]),  # [n_q, d_model]
        f_norm=own(record.f_norm[b, :, :n_k]),  # [head, n_k] ||W_O^h v_j||
    )
    if record.lean:
        return LayerTrace(
            scores=lean_scores,
            weights=lean_weights,
            mask=record.rule.item(b, n_q, n_k),
            lse=own(record.lse[b, :, :n_q]),  # [head, n_q]
            **common,
        )
    return LayerTrace(
        scores=own(record.scores[b, :, :n_q, :n_k]),  # [head, n_q, n_k]
        mask=_shared_mask(record, cut, masks),  # [n_q, n_k]
        weights=own(record.weights[b, :, :n_q, :n_k]),  # [head, n_q, n_k]
        **common,
    )


def _shared_mask(record: LayerRecord, cut: Cut, masks: list[torch.Tensor]) -> torch.Tensor:
    """The recorded mask of one input as bool [n_q, n_k] on the CPU: the one in `masks` equal to
    it, else it (added to `masks`)."""
    mask = torch.ones(cut.n_q, cut.n_k, dtype=torch.bool)  # [q, k]
    if record.mask is not None:
        item = record.mask[min(cut.b, record.mask.shape[0] - 1), 0]  # [q|1, k]
        mask &= cut.cpu(item[: cut.n_q, : cut.n_k]).bool()
    mask = next((m for m in masks if torch.equal(m, mask)), mask)
    if not any(m is mask for m in masks):
        masks.append(mask)
    return mask


def assemble(model: LoadedModel, batch: Batch, recorded: Recorded) -> list[Trace]:
    """One Trace per input of `batch` from what its forward recorded: all of the batch's positions
    (padding included, masked), or each input's own tokens when `batch.trim`."""
    meta = _meta(model, recorded.knobs, batch.limit)
    copy = batch.trim and len(batch.n_input) > 1
    cuts = [Cut(b, batch.n, batch.n, copy, recorded.on_cpu) for b in range(len(batch.n_input))]
    return [_trace(model, batch, recorded, cut, meta) for cut in cuts]


def _trace(model: LoadedModel, batch: Batch, recorded: Recorded, cut: Cut, meta: dict) -> Trace:
    """The Trace of one input (row `cut.b`), with its decoder and cross parts if any."""
    b, enc = cut.b, batch.enc
    attention = enc["attention_mask"][b].tolist()
    n_b = sum(attention) if batch.trim else batch.n  # trimmed: its own tokens (right padding)
    ids, attention, cut = enc["input_ids"][b, :n_b].tolist(), attention[:n_b], cut.sized(n_b, n_b)
    masks: list[torch.Tensor] = []  # distinct masks, so layers with the same one share it
    first = model.blocks[0].part
    types = enc["token_type_ids"][b, :n_b].tolist() if "token_type_ids" in enc else [0] * n_b
    trace = Trace(
        tokens=token_labels(model.tokenizer, ids),  # byte pieces read as characters
        layers=_layers(model, recorded, first, cut, masks),
        source=model.name,
        truncated=batch.n_input[b] > sum(attention),
        n_input_tokens=batch.n_input[b],
        token_types=types,
        special=special_positions(model, ids, attention),
        hidden=cut.own(cut.cpu(recorded.hidden[b, :n_b])),  # [n, d_model]
        embedding=cut.own(cut.cpu(recorded.embedding[b])),  # [d_model]
        meta=dict(meta, part=first, first_layer=0),
        token_ids=ids,
    )
    if model.kind == "decoder":
        trace.next_logits = cut.cpu(recorded.next_logits[b])  # [vocab]
    if batch.dec is not None:
        _add_parts(model, batch, recorded, trace, cut, masks)
    if recorded.streams:  # the last token's residual stream, read during the forward
        keep_stream(model, trace, recorded.streams[b], cut.cpu(recorded.next_logits[b]))
    return trace


def _add_parts(
    model: LoadedModel, batch: Batch, recorded: Recorded, trace: Trace, cut: Cut, masks: list
) -> None:
    """An encoder-decoder's decoder and cross parts, on the encoder's trace of row `cut.b`."""
    b, dec = cut.b, batch.dec
    ids = dec["input_ids"][b].tolist()
    m, tokens = len(ids), token_labels(model.tokenizer, ids)
    special = special_positions(model, ids, dec["attention_mask"][b].tolist())
    for part, keys in ((DECODER, None), (CROSS, trace.tokens)):
        trace.parts[part] = Trace(
            tokens=tokens,
            key_tokens=keys,
            layers=_layers(model, recorded, part, cut.sized(m, cut.n_k if keys else m), masks),
            source=model.name,
            special=special if keys is None else trace.special,
            hidden=cut.cpu(recorded.dec_hidden[b]),  # [m, d_model] the decoder's final states
            embedding=cut.cpu(recorded.dec_embedding[b]),  # [d_model]
            next_logits=cut.cpu(recorded.next_logits[b]),  # [vocab]
            meta=dict(trace.meta, part=part, first_layer=_first(model, part)),
            token_ids=ids,
        )


def _layers(
    model: LoadedModel, recorded: Recorded, part: str, cut: Cut, masks: list[torch.Tensor]
) -> list[LayerTrace]:
    """One LayerTrace per block of `part`, in order."""
    records = recorded.record.layers
    blocks = enumerate(model.blocks)
    return [layer_from_record(records[i], cut, masks) for i, block in blocks if block.part == part]


def _first(model: LoadedModel, part: str) -> int:
    """The layer number (as in `ablate`) of the first block of a part."""
    return next(i for i, b in enumerate(model.blocks) if b.part == part)


def limit_reason(model: LoadedModel, limit: int) -> str:
    """Why inputs stop at `limit` tokens: "model" (its context), "tokens" (ATTNVIZ_MAX_TOKENS) or
    "budget" (the trace's bytes or work on this server)."""
    if limit >= model.max_length:
        return "model"
    return "tokens" if limit >= budget().max_tokens else "budget"


def _meta(model: LoadedModel, knobs: Knobs, limit: int) -> dict[str, Any]:
    """What every trace of this forward says about how it was made."""
    return {
        "device": model.device,
        "use_scale": knobs.use_scale,
        "temperature": knobs.temperature,
        "ablate": sorted(knobs.ablate),
        "mask_tokens": list(knobs.mask_tokens),
        "max_length": limit,
        "lean": knobs.lean,
        "limit_reason": limit_reason(model, limit),
        "model_type": model.model_type,
        "kind": model.kind,
        "embedding": "mean-pooled over the attention mask, not L2-normalised",
    }
