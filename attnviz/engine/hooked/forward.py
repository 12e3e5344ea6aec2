"""The forward step of a trace: a tokenized batch through the model once, tokens in, records and
outputs out. The attention function fills one LayerRecord per block (intercept.py); this step
adds what each block's record needs from the rest of the model (its W_O output, its input for the
post-LN families, the key norms) and reads off what a trace keeps of the model's outputs (final
states, the pooled embedding, the next-token logits). Turning that into Traces is
attnviz.engine.hooked.assembly's job."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from attnviz.engine.budget import check_model_trace, lean_trace
from attnviz.engine.hooked.families import DECODER, POST_LN
from attnviz.engine.hooked.intercept import Call, Recording, active, catch_outputs
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.engine.hooked.readout import block_output, w_o_gram_of, w_o_matrix
from attnviz.engine.hooked.stream import Stream, recording
from attnviz.engine.request import Knobs
from attnviz.engine.writes import key_norms


@dataclass(frozen=True, eq=False)
class Batch:
    """One forward's tokenized inputs ([batch, n] each; an encoder-decoder's decoder input in
    `dec`), each input's length before any cut, the knobs and the token limit. `trim`: each trace
    cut to its own tokens (right padding, no decoder), with tensors of its own."""

    enc: dict[str, torch.Tensor]
    n_input: list[int]
    dec: dict[str, torch.Tensor] | None
    knobs: Knobs
    limit: int
    trim: bool = False

    @property
    def n(self) -> int:
        """Positions per input (the longest input's, padding included)."""
        return self.enc["input_ids"].shape[1]

    @property
    def n_all(self) -> int:
        """Positions the model reads per input: the encoder's and any decoder's."""
        return self.n + (0 if self.dec is None else self.dec["input_ids"].shape[1])

    @property
    def last_mask(self) -> torch.Tensor:
        """The attention mask of the sequence whose last token predicts the next: [batch, n]."""
        return (self.dec or self.enc)["attention_mask"]


@dataclass(eq=False)
class Recorded:
    """What one forward gives the assembly, batch first, where the model computed it: every
    block's LayerRecord (in `record.layers`), the knobs as run, and the model's outputs a trace
    keeps."""

    record: Recording
    knobs: Knobs  # as run: `hide_in` and `lean` decided for this forward
    hidden: torch.Tensor  # [batch, n, d_model] the final states (an encoder-decoder's encoder)
    embedding: torch.Tensor  # [batch, d_model] mean-pooled over the attention mask
    next_logits: torch.Tensor | None = None  # [batch, vocab] after the last real token
    dec_hidden: torch.Tensor | None = None  # [batch, m, d_model] the decoder's final states
    dec_embedding: torch.Tensor | None = None  # [batch, d_model]
    streams: list[Stream] = field(default_factory=list)  # the last token's residual stream

    @property
    def on_cpu(self) -> bool:
        """Whether what was recorded is CPU float32 already (nothing to convert)."""
        return self.hidden.device.type == "cpu" and self.hidden.dtype == torch.float32


def run_forward(model: LoadedModel, batch: Batch) -> Recorded:
    """The model run once on `batch` with the batch's knobs, every block recorded."""
    check_model_trace(model, len(batch.n_input), batch.n_all)  # the real length, not the limit
    masked = batch.knobs.mask_tokens
    if masked and not masked[-1] < batch.n:
        raise ValueError(f"mask_tokens={list(masked)} must be token positions 0..{batch.n - 1}")
    knobs = _knobs_as_run(model, batch)
    record = Recording(blocks={id(b.attention): i for i, b in enumerate(model.blocks)})
    inputs = _model_inputs(model, batch)
    catch_outputs([b.w_o for b in model.blocks])
    real_last = batch.last_mask.sum(-1) - 1  # [batch] the last real token
    with torch.inference_mode(), recording(model, real_last) as streams:
        with active(record):
            out = model.model(
                **inputs,
                output_hidden_states=model.kind != "encoder" or model.model_type in POST_LN,
                attnviz_call=Call(knobs, record),
            )
        _complete_records(model, record, knobs, out)
        recorded = _recorded(model, inputs, out, record, knobs)
    recorded.streams = streams
    return recorded


def _knobs_as_run(model: LoadedModel, batch: Batch) -> Knobs:
    """The batch's knobs with where hidden tokens hide and whether the trace is lean."""
    hide_in = None
    if batch.dec is not None:  # mask_tokens are source tokens: hidden from encoder and cross
        hide_in = frozenset(i for i, b in enumerate(model.blocks) if b.part != DECODER)
    lean = lean_trace(model, len(batch.n_input), batch.n_all)
    return replace(batch.knobs, hide_in=hide_in, lean=lean)


def _model_inputs(model: LoadedModel, batch: Batch) -> dict[str, Any]:
    """The keyword arguments of the model's call for this batch, on the model's device."""
    dev = torch.device(model.device)
    enc, dec = batch.enc, batch.dec
    inputs = {k: v.to(dev) for k, v in enc.items() if k != "special_tokens_mask"}
    if model.kind != "encoder":  # decoders take no segment ids (GPT-2 would embed them)
        inputs = {k: inputs[k] for k in ("input_ids", "attention_mask")}
    if model.kind == "decoder":
        # Only the logits after each input's last real token are kept ([batch, k, vocab], k the
        # distinct last positions, instead of [batch, n, vocab]: 256 MiB for a 128k vocabulary
        # at 512, and a lm_head over every padded position of a batch of sentences). As positions
        # even when that is the last one: transformers slices an int as hidden[:, -1:], a strided
        # view that lm_head multiplies sentence by sentence, its weight copied for each (SmolLM2,
        # four sentences: 306 ms in bfloat16 on a CPU against 4 ms, 29 against 13.5 in float32).
        mask = enc["attention_mask"]  # [batch, n]
        inputs["logits_to_keep"] = (mask.sum(-1) - 1).unique().to(dev)  # [k] sorted
    if dec is not None:
        inputs["decoder_input_ids"] = dec["input_ids"].to(dev)
        inputs["decoder_attention_mask"] = dec["attention_mask"].to(dev)
    return inputs


def _complete_records(model: LoadedModel, record: Recording, knobs: Knobs, out: Any) -> None:
    """Each block's record completed after the forward: its output after W_O, its input (the
    post-LN families' x) and what each key sends through each head (f_norm)."""
    states = out.hidden_states if model.model_type in POST_LN else None
    for i, block in enumerate(model.blocks):
        rec = record.layers[i]
        rec.output = block_output(block, record, i)  # [batch, n, d_model]
        if states is not None:
            rec.x = states[block.layer]  # [batch, n, d_model]
        gram = w_o_gram_of(block, rec.v.device)  # [head, d_head, d_head]
        heads_off = knobs.heads_off(i)
        rec.f_norm = key_norms(rec.v, w_o_matrix(block), block.n_heads, heads_off, gram)


def _pooled(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of the states over the attention mask: [batch, n, d] -> [batch, d]."""
    keep = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [batch, n, 1]
    return (hidden * keep).sum(1) / keep.sum(1).clamp_min(1e-9)  # [batch, d_model]


def _recorded(
    model: LoadedModel, inputs: dict, out: Any, record: Recording, knobs: Knobs
) -> Recorded:
    """The records with the model's outputs a trace keeps: final states, their mean, an
    encoder-decoder's decoder states, and the logits after the last real token."""
    if model.kind == "encoder":
        hidden = out.last_hidden_state  # [batch, n, d_model]
    elif model.kind == "decoder":
        hidden = out.hidden_states[-1]  # [batch, n, d_model]
    else:
        hidden = out.encoder_last_hidden_state  # [batch, n, d_model]
    recorded = Recorded(record, knobs, hidden, _pooled(hidden, inputs["attention_mask"]))
    if "decoder_input_ids" in inputs:
        recorded.dec_hidden = out.decoder_hidden_states[-1]  # [batch, m, d_model]
        mask = inputs["decoder_attention_mask"]  # [batch, m]
        recorded.dec_embedding = _pooled(recorded.dec_hidden, mask)  # [batch, d_model]
    if model.kind != "encoder":
        mask = inputs.get("decoder_attention_mask", inputs["attention_mask"])  # [batch, m|n]
        last = mask.sum(-1) - 1  # [batch]
        kept = inputs.get("logits_to_keep")
        if kept is not None:
            last = torch.searchsorted(kept, last)  # [batch] where each last position was kept
        rows = torch.arange(last.shape[0], device=last.device)  # [batch]
        recorded.next_logits = out.logits[rows, last]  # [batch, vocab] after the last token
    return recorded
